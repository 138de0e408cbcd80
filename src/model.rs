//! Domain vocabulary shared by every layer. Pure: no I/O here.

use std::fmt;
use std::str::FromStr;

/// `showtime.id` in MySQL, the `{<id>}` hash tag in Redis.
pub type ShowtimeId = i64;
/// `hall_seat.seat_no`, also the field name in the seat hash.
pub type SeatNo = String;

/// A seat's value in `{prefix}seat:{S}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum SeatState {
    Free,
    Locked,
    Sold,
}

impl SeatState {
    pub const ALL: [SeatState; 3] = [SeatState::Free, SeatState::Locked, SeatState::Sold];

    /// The exact string seatflow stores in Redis.
    pub fn as_redis(self) -> &'static str {
        match self {
            SeatState::Free => "0",
            SeatState::Locked => "1",
            SeatState::Sold => "2",
        }
    }

    /// Parses a Redis value; anything but `0`, `1`, `2` is invalid data.
    pub fn from_redis(raw: &str) -> Option<SeatState> {
        match raw {
            "0" => Some(SeatState::Free),
            "1" => Some(SeatState::Locked),
            "2" => Some(SeatState::Sold),
            _ => None,
        }
    }

    /// The state an occupancy implies (the contract's expected state).
    pub fn expected(occupant: Option<OrderStatus>) -> SeatState {
        match occupant {
            Some(OrderStatus::Paid) => SeatState::Sold,
            Some(OrderStatus::Pending) => SeatState::Locked,
            None => SeatState::Free,
        }
    }
}

/// Status of a *valid* order: the only ones whose `order_seat` rows occupy seats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OrderStatus {
    Pending,
    Paid,
}

impl OrderStatus {
    /// `PENDING` / `PAID`; any other status is not an occupancy.
    pub fn from_db(raw: &str) -> Option<OrderStatus> {
        match raw {
            "PENDING" => Some(OrderStatus::Pending),
            "PAID" => Some(OrderStatus::Paid),
            _ => None,
        }
    }
}

/// The five repairs. The order of `ALL` is the order `once` runs them in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    ExpiredOrders,
    PaidSeats,
    MissingHashes,
    OrphanLocks,
    SoldOrphans,
}

impl Kind {
    pub const ALL: [Kind; 5] = [
        Kind::ExpiredOrders,
        Kind::PaidSeats,
        Kind::MissingHashes,
        Kind::OrphanLocks,
        Kind::SoldOrphans,
    ];

    /// The metric label and config section name (`snake_case`).
    pub const fn label(self) -> &'static str {
        match self {
            Kind::ExpiredOrders => "expired_orders",
            Kind::PaidSeats => "paid_seats",
            Kind::MissingHashes => "missing_hashes",
            Kind::OrphanLocks => "orphan_locks",
            Kind::SoldOrphans => "sold_orphans",
        }
    }

    /// The CLI spelling (`kebab-case`).
    pub fn cli_name(self) -> &'static str {
        match self {
            Kind::ExpiredOrders => "expired-orders",
            Kind::PaidSeats => "paid-seats",
            Kind::MissingHashes => "missing-hashes",
            Kind::OrphanLocks => "orphan-locks",
            Kind::SoldOrphans => "sold-orphans",
        }
    }

    /// The key of this job's count in the report's `fixed` object.
    pub fn fixed_counter(self) -> &'static str {
        match self {
            Kind::ExpiredOrders => "expired_cancelled",
            Kind::PaidSeats => "paid_seats_fixed",
            Kind::MissingHashes => "hashes_rebuilt",
            Kind::OrphanLocks => "orphan_locks_released",
            Kind::SoldOrphans => "sold_orphans_released",
        }
    }

    /// Jobs whose repairs wait out `reconcile.orphan_grace` (safety rule 4).
    pub fn needs_grace(self) -> bool {
        matches!(self, Kind::OrphanLocks | Kind::SoldOrphans)
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.label())
    }
}

impl FromStr for Kind {
    type Err = String;

    /// Accepts both the CLI and the label spelling.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Kind::ALL
            .into_iter()
            .find(|k| k.cli_name() == s || k.label() == s)
            .ok_or_else(|| {
                let names: Vec<_> = Kind::ALL.iter().map(|k| k.cli_name()).collect();
                format!("unknown job `{s}`; expected one of {}", names.join(", "))
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seat_states_round_trip_through_redis_strings() {
        for s in SeatState::ALL {
            assert_eq!(SeatState::from_redis(s.as_redis()), Some(s));
        }
        assert_eq!(SeatState::from_redis("x"), None);
        assert_eq!(SeatState::from_redis(" 1"), None);
    }

    #[test]
    fn kinds_parse_from_both_spellings() {
        for k in Kind::ALL {
            assert_eq!(k.cli_name().parse::<Kind>().unwrap(), k);
            assert_eq!(k.label().parse::<Kind>().unwrap(), k);
        }
        assert!(
            "orphans"
                .parse::<Kind>()
                .unwrap_err()
                .contains("orphan-locks")
        );
    }
}
