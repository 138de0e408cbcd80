//! A seat's `order_seat` rows (and their orders) as MySQL showed them, in
//! 64 bits: rule 4's "continuously" asked in MySQL's own terms. A suspect
//! record that carries the mark its first sighting read is still orphaned
//! throughout while a confirmation reads the same mark, whatever the clocks of
//! the application (order times) and of Redis (first sightings) say.
//!
//! Every order write of the contract changes a row's mark: a new order adds
//! a row, a payment, cancel or refund changes the status (and `active`, and
//! the order's latest time); a row deleted or edited by hand changes it too.

use std::hash::Hasher;

use crate::model::contract::SeatRowFacts;

/// A seat's rows as a confirmation reads them now.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SeatRows {
    /// The latest time of any order on the seat (the application's clock;
    /// `i64::MAX` for a time that does not decode: "just now").
    pub last_activity_ms: Option<i64>,
    pub mark: RowsMark,
}

/// The rows' mark: the wrapping sum of each row's hash, so that the order
/// in which MySQL returns the rows does not matter.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RowsMark(pub u64);

impl RowsMark {
    /// Adds one row, with its order's latest time (`touched_ms`, as read).
    pub fn add(&mut self, row: &SeatRowFacts, touched_ms: Option<i64>) {
        // FNV-1a over explicit little-endian bytes: the same on every
        // replica and every build (std's hashers promise neither). A field
        // is preceded by its length so that "ab"+"c" and "a"+"bc" differ.
        // Two builds that spelled a field differently would only disagree
        // on a mark, which restarts a grace: the safe direction.
        let mut h = fnv::FnvHasher::default();
        let mut field = |bytes: &[u8]| {
            h.write(&(bytes.len() as u64).to_le_bytes());
            h.write(bytes);
        };
        // Valid keys hash as they always have (replicas of two builds
        // compute one mark); a NULL key as the words of its error.
        match &row.showtime_id {
            Ok(id) => field(&id.to_le_bytes()),
            Err(e) => field(e.as_bytes()),
        }
        match &row.order_id {
            Ok(id) => field(&id.to_le_bytes()),
            Err(e) => field(e.as_bytes()),
        }
        match &row.seat_no {
            Ok(seat) => field(seat.as_bytes()),
            Err(e) => field(e.as_bytes()),
        }
        field(format!("{:?}", row.active).as_bytes());
        match &row.order {
            None => field(b"no order"),
            Some(o) => {
                field(format!("{:?}", o.status).as_bytes());
                field(format!("{:?}", o.showtime_id).as_bytes());
                field(format!("{:?}", o.dates).as_bytes());
            }
        }
        field(format!("{touched_ms:?}").as_bytes());
        self.0 = self.0.wrapping_add(h.finish());
    }

    /// `0123456789abcdef`: as stored in a suspect record.
    pub fn encode(&self) -> String {
        format!("{:016x}", self.0)
    }

    pub fn decode(raw: &str) -> Option<RowsMark> {
        (raw.len() == 16)
            .then(|| u64::from_str_radix(raw, 16).ok())
            .flatten()
            .map(RowsMark)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::contract::OrderFacts;

    fn row(order_id: i64, status: &str, active: Option<i64>) -> SeatRowFacts {
        SeatRowFacts {
            showtime_id: Ok(1),
            order_id: Ok(order_id),
            seat_no: Ok("A-1".into()),
            active: Ok(active),
            order: Some(OrderFacts {
                status: Ok(status.into()),
                showtime_id: Ok(1),
                dates: Ok(()),
            }),
        }
    }

    fn mark(rows: &[(SeatRowFacts, Option<i64>)]) -> RowsMark {
        let mut m = RowsMark::default();
        for (r, t) in rows {
            m.add(r, *t);
        }
        m
    }

    #[test]
    fn every_write_of_the_contract_changes_the_mark_and_row_order_does_not() {
        let pending = (row(7, "PENDING", Some(1)), Some(1_000));
        let other = (row(3, "CANCELLED", None), Some(500));
        let base = mark(&[pending.clone(), other.clone()]);
        assert_eq!(base, mark(&[other.clone(), pending.clone()]));
        assert_ne!(base, mark(std::slice::from_ref(&other)), "a new order");
        for changed in [
            (row(7, "PAID", Some(1)), Some(1_000)),
            (row(7, "CANCELLED", None), Some(1_000)),
            (row(7, "PENDING", None), Some(1_000)),
            (row(7, "PENDING", Some(1)), Some(1_001)),
            (row(8, "PENDING", Some(1)), Some(1_000)),
        ] {
            assert_ne!(base, mark(&[changed.clone(), other.clone()]), "{changed:?}");
        }
        let mut no_order = pending.0.clone();
        no_order.order = None;
        assert_ne!(base, mark(&[(no_order, None), other]), "its order deleted");
    }

    #[test]
    fn marks_round_trip() {
        let m = mark(&[(row(7, "PENDING", Some(1)), Some(1_000))]);
        assert_eq!(RowsMark::decode(&m.encode()), Some(m));
        assert_eq!(RowsMark::decode(&RowsMark(0).encode()), Some(RowsMark(0)));
        for bad in ["", "12", "zzzzzzzzzzzzzzzz", "0123456789abcdef0"] {
            assert_eq!(RowsMark::decode(bad), None, "{bad}");
        }
    }
}
