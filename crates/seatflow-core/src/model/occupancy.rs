//! What MySQL says of the seats: an occupancy of whole showtimes (valid
//! occupancies and rows outside the contract, in one buffer), and what it
//! says of one seat (`SeatTruth`: which writes it allows, rule 15). Pure.

use super::{SeatState, ShowtimeId};

/// The `order_seat` rows of a set of showtimes that may hold a seat: valid
/// occupancies and rows the contract does not explain. Seat numbers share
/// one buffer and rows are sorted by showtime: a chunk's occupancy is a
/// handful of allocations, not one per seat.
#[derive(Debug, Clone, Default)]
pub struct Occupancy {
    seats: String,
    rows: Vec<HeldSeat>,
    /// Showtimes with a row that may hold any of their seats (no
    /// `seat_no`, or no `order_id` to look its seat up by), sorted.
    any_seat: Vec<ShowtimeId>,
}

#[derive(Debug, Clone, Copy)]
struct HeldSeat {
    showtime: ShowtimeId,
    start: usize,
    end: usize,
    holding: Holding,
    order_id: i64,
}

/// What one `order_seat` row says of its seat.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Holding {
    /// A valid occupancy read strictly by the contract: `active = 1`, the
    /// order `PENDING` or `PAID` exactly, in the row's own showtime, dates
    /// that decode, and the seat an enabled template seat byte for byte.
    Valid(OrderStatus),
    /// A row the contract does not explain (a status it does not spell,
    /// `active` other than 1 or NULL, a showtime that differs from its
    /// order's, a date that does not decode, a seat number that only the
    /// collation matches, no order at all). Whatever it means, MySQL may hold
    /// the seat with it: no write lowers that seat (rule 15). The seat
    /// number is the template's spelling of the seat it names.
    Unknown { order_id: i64 },
}

/// Collects occupancy rows in any order; [`OccupancyBuilder::finish`] sorts them.
#[derive(Debug, Default)]
pub struct OccupancyBuilder(Occupancy);

impl OccupancyBuilder {
    pub fn push(&mut self, showtime: ShowtimeId, seat: &str, holding: Holding) {
        let order_id = match holding {
            Holding::Unknown { order_id } => order_id,
            Holding::Valid(_) => 0,
        };
        self.push_row(showtime, seat, holding, order_id);
    }

    /// A row with the order it belongs to (`order_seat.order_id`).
    pub fn push_row(&mut self, showtime: ShowtimeId, seat: &str, holding: Holding, order_id: i64) {
        let start = self.0.seats.len();
        self.0.seats.push_str(seat);
        self.0.rows.push(HeldSeat {
            showtime,
            start,
            end: self.0.seats.len(),
            holding,
            order_id,
        });
    }

    /// A row that may hold any seat of `showtime` (its seat cannot be
    /// named): no seat of the showtime is lowered (rule 15).
    pub fn push_any_seat(&mut self, showtime: ShowtimeId) {
        self.0.any_seat.push(showtime);
    }

    pub fn finish(mut self) -> Occupancy {
        self.0.rows.sort_by_key(|r| r.showtime);
        self.0.any_seat.sort_unstable();
        self.0.any_seat.dedup();
        self.0
    }
}

impl Occupancy {
    /// One showtime's rows (none if it has no rows).
    pub fn of(&self, showtime: ShowtimeId) -> ShowtimeOccupancy<'_> {
        let from = self.rows.partition_point(|r| r.showtime < showtime);
        let to = from + self.rows[from..].partition_point(|r| r.showtime == showtime);
        ShowtimeOccupancy {
            seats: &self.seats,
            rows: &self.rows[from..to],
            any_seat: self.any_seat.binary_search(&showtime).is_ok(),
        }
    }

    /// Number of rows across all showtimes (rows that may hold any seat
    /// apart).
    pub fn len(&self) -> usize {
        self.rows.len()
    }

    pub fn is_empty(&self) -> bool {
        self.rows.is_empty() && self.any_seat.is_empty()
    }

    /// The showtimes with a row that may hold any of their seats.
    pub fn any_seat(&self) -> &[ShowtimeId] {
        &self.any_seat
    }

    /// Every row: showtime, seat, holding, order id.
    pub fn iter(&self) -> impl Iterator<Item = (ShowtimeId, &str, Holding, i64)> {
        self.rows.iter().map(|r| {
            (
                r.showtime,
                &self.seats[r.start..r.end],
                r.holding,
                r.order_id,
            )
        })
    }
}

/// One showtime's part of an [`Occupancy`].
#[derive(Debug, Clone, Copy)]
pub struct ShowtimeOccupancy<'a> {
    seats: &'a str,
    rows: &'a [HeldSeat],
    any_seat: bool,
}

impl<'a> ShowtimeOccupancy<'a> {
    pub fn iter(&self) -> impl Iterator<Item = (&'a str, Holding)> + 'a {
        let seats = self.seats;
        self.rows
            .iter()
            .map(move |r| (&seats[r.start..r.end], r.holding))
    }

    /// What MySQL says of `seat` (a linear scan: for single seats, not for
    /// sweeping).
    pub fn get(&self, seat: &str) -> SeatTruth {
        let mut truth = SeatTruth::of(self.iter().filter(|(s, _)| *s == seat).map(|(_, h)| h));
        truth.unknown |= self.any_seat;
        truth
    }

    /// A row may hold any seat of the showtime: none is lowered.
    pub fn holds_any_seat(&self) -> bool {
        self.any_seat
    }

    pub fn is_empty(&self) -> bool {
        self.rows.is_empty() && !self.any_seat
    }
}

/// What MySQL says of one seat, from every row that may hold it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SeatTruth {
    /// The valid occupancy, if exactly one valid order holds it.
    pub valid: Option<OrderStatus>,
    /// Some row the contract does not explain may hold it (or two valid
    /// rows disagree): no write may lower it.
    pub unknown: bool,
}

impl SeatTruth {
    /// Folds the rows of one seat.
    pub fn of(holdings: impl IntoIterator<Item = Holding>) -> SeatTruth {
        let mut truth = SeatTruth::default();
        for h in holdings {
            truth.add(h);
        }
        truth
    }

    pub fn add(&mut self, holding: Holding) {
        match holding {
            Holding::Unknown { .. } => self.unknown = true,
            Holding::Valid(status) => match self.valid {
                None => self.valid = Some(status),
                // Two valid rows on one seat (uq_occupancy forbids it):
                // nobody knows which holds, so the seat is not lowered;
                // raising it to the higher of the two harms neither.
                Some(held) => {
                    self.unknown = true;
                    if held != status {
                        self.valid = Some(OrderStatus::Paid);
                    }
                }
            },
        }
    }

    /// The state the valid occupancy implies.
    pub fn expected(&self) -> SeatState {
        SeatState::expected(self.valid)
    }

    /// True when MySQL, read strictly, allows writing `target` over
    /// `observed` now: the valid occupancy implies exactly `target`, and a
    /// lowering write also needs no row the contract does not explain.
    pub fn allows(&self, observed: Option<SeatState>, target: SeatState) -> bool {
        self.expected() == target && !(self.unknown && SeatState::lowers(observed, target))
    }
}

/// Status of a *valid* order: the only ones whose `order_seat` rows occupy seats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OrderStatus {
    Pending,
    Paid,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn occupancy_groups_rows_by_showtime() {
        use OrderStatus::*;
        let occ: Occupancy = [
            (7, "A-1", Holding::Valid(Paid)),
            (3, "B-2", Holding::Valid(Pending)),
            (7, "A-2", Holding::Valid(Pending)),
            (7, "A-1", Holding::Unknown { order_id: 4 }),
        ]
        .into_iter()
        .collect();
        assert_eq!(occ.len(), 4);
        assert!(!occ.is_empty() && Occupancy::default().is_empty());
        let seven: Vec<_> = occ.of(7).iter().collect();
        assert_eq!(
            seven,
            vec![
                ("A-1", Holding::Valid(Paid)),
                ("A-2", Holding::Valid(Pending)),
                ("A-1", Holding::Unknown { order_id: 4 })
            ]
        );
        assert_eq!(
            occ.of(7).get("A-1"),
            SeatTruth {
                valid: Some(Paid),
                unknown: true
            }
        );
        assert_eq!(occ.of(3).get("B-2").valid, Some(Pending));
        assert!(occ.of(5).is_empty() && occ.of(99).is_empty() && !occ.of(7).is_empty());
    }

    /// Rule 15: raising needs the valid occupancy's state; lowering also
    /// needs no row the contract does not explain.
    #[test]
    fn a_seat_truth_allows_raising_on_a_valid_occupancy_and_lowering_only_when_nothing_else_holds_it()
     {
        use SeatState::*;
        let free = SeatTruth::default();
        let unknown = SeatTruth {
            valid: None,
            unknown: true,
        };
        let pending_and_unknown = SeatTruth {
            valid: Some(OrderStatus::Pending),
            unknown: true,
        };
        assert!(free.allows(Some(Locked), Free));
        assert!(free.allows(None, Free));
        assert!(!unknown.allows(Some(Locked), Free));
        assert!(!unknown.allows(Some(Sold), Free));
        assert!(!unknown.allows(None, Free), "an absent field filled with 0");
        assert!(pending_and_unknown.allows(Some(Free), Locked), "a raise");
        assert!(pending_and_unknown.allows(None, Locked), "a raise");
        assert!(
            !pending_and_unknown.allows(Some(Sold), Locked),
            "a lowering"
        );
        assert!(!free.allows(Some(Free), Locked), "no valid occupancy");
        // Two valid rows that disagree: raised to the higher, never lowered.
        let both = SeatTruth::of([
            Holding::Valid(OrderStatus::Pending),
            Holding::Valid(OrderStatus::Paid),
        ]);
        assert_eq!(both.expected(), Sold);
        assert!(both.unknown);
        assert!(SeatState::lowers(Some(Sold), Locked));
        assert!(!SeatState::lowers(Some(Free), Locked));
        assert!(!SeatState::lowers(None, Sold));
    }
}
