//! Domain vocabulary shared by every layer. Pure: no I/O here.

use std::collections::HashMap;

use std::fmt;

use std::str::FromStr;

pub mod contract;
pub mod holds;
mod occupancy;
mod rows_mark;
pub mod schema;
pub mod seat_names;

pub use occupancy::{
    Holding, Occupancy, OccupancyBuilder, OrderStatus, SeatTruth, ShowtimeOccupancy,
};
pub use rows_mark::{RowsMark, SeatRows};

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
        SeatState::from_bytes(raw.as_bytes())
    }

    /// [`SeatState::from_redis`] on the raw bytes of a reply.
    pub fn from_bytes(raw: &[u8]) -> Option<SeatState> {
        match raw {
            b"0" => Some(SeatState::Free),
            b"1" => Some(SeatState::Locked),
            b"2" => Some(SeatState::Sold),
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

    /// True when writing `target` over `observed` lowers the seat
    /// (`2 -> 1/0`, `1 -> 0`) or fills an absent field with `"0"`: either
    /// makes the seat sellable (or less sold), so it needs MySQL to show no
    /// occupancy beyond the target's, by any row, valid or not (rule 15).
    pub fn lowers(observed: Option<SeatState>, target: SeatState) -> bool {
        match observed {
            Some(o) => target < o,
            None => target == SeatState::Free,
        }
    }
}

/// A hall's enabled seats in template order, with a lookup from seat number
/// to position. Built once per hall and shared by every showtime in it, so
/// planning a showtime needs no per-seat map of its own.
#[derive(Debug, Clone, Default)]
pub struct Template {
    seats: Vec<SeatNo>,
    position: HashMap<Box<[u8]>, usize>,
    /// Positions of seats that MySQL's comparison of `order_seat.seat_no`
    /// takes for another seat of the template (rule 17), sorted.
    uncertain: Vec<usize>,
}

impl Template {
    /// The hall's seats in order; a name given twice is one seat.
    pub fn new(seats: Vec<SeatNo>) -> Template {
        let mut position = HashMap::with_capacity(seats.len());
        let mut unique = Vec::with_capacity(seats.len());
        for seat in seats {
            if let std::collections::hash_map::Entry::Vacant(e) =
                position.entry(seat.as_bytes().into())
            {
                e.insert(unique.len());
                unique.push(seat);
            }
        }
        Template {
            seats: unique,
            position,
            uncertain: Vec::new(),
        }
    }

    /// The template with its groups of seats that are one seat to MySQL
    /// (`A-01` and `a-01` under a case-insensitive collation): each member
    /// is uncertain: raised where a valid occupancy names it, never lowered,
    /// never written free into a rebuilt hash. Names of no seat are ignored.
    pub fn with_groups(mut self, groups: &[Vec<SeatNo>]) -> Template {
        for group in groups {
            let members: Vec<usize> = group
                .iter()
                .filter_map(|s| self.find(s.as_bytes()))
                .collect();
            if members.len() > 1 {
                self.uncertain.extend(members);
            }
        }
        self.uncertain.sort_unstable();
        self.uncertain.dedup();
        self
    }

    /// True when the seat at `position` is one seat to MySQL with another.
    pub fn uncertain(&self, position: usize) -> bool {
        self.uncertain.binary_search(&position).is_ok()
    }

    pub fn seats(&self) -> &[SeatNo] {
        &self.seats
    }

    pub fn len(&self) -> usize {
        self.seats.len()
    }

    pub fn is_empty(&self) -> bool {
        self.seats.is_empty()
    }

    /// Where `seat` sits in the template, if it is an enabled seat.
    pub fn find(&self, seat: &[u8]) -> Option<usize> {
        self.position.get(seat).copied()
    }

    /// Like [`Template::find`], trying position `hint` first: a seat hash
    /// written in template order (as seatflow and our rebuild write it) then
    /// matches without hashing.
    pub fn find_near(&self, seat: &[u8], hint: usize) -> Option<usize> {
        match self.seats.get(hint) {
            Some(s) if s.as_bytes() == seat => Some(hint),
            _ => self.find(seat),
        }
    }
}

/// A seat hash as `HGETALL` returns it: field, value, field, value, … as raw
/// bytes, in the order Redis keeps them. Validating them is the planner's job
/// (a non-UTF-8 field is bad data like any other, not a failed read).
///
/// Kept as two allocations whatever the hash's size: the items' bytes end to
/// end, and where each item ends. A sweep holds a chunk's hashes (60,000
/// fields at 200 × 300) while it plans and repairs them and reads the next
/// chunk; one small allocation per field and value, as the reply's own
/// buffers are, cost about 112 bytes a seat against about 20 so.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SeatFields {
    /// Every item's bytes, end to end.
    bytes: Vec<u8>,
    /// Where each item ends in `bytes`; an even number of items.
    ends: Vec<usize>,
}

impl SeatFields {
    /// From the flat reply's items (field, value, …), copied into one
    /// buffer; a dangling last item (never sent by Redis) is dropped.
    pub fn from_items<B: AsRef<[u8]>>(items: &[B]) -> SeatFields {
        let items = &items[..items.len() - items.len() % 2];
        let total = items.iter().map(|i| i.as_ref().len()).sum();
        let mut fields = SeatFields {
            bytes: Vec::with_capacity(total),
            ends: Vec::with_capacity(items.len()),
        };
        for item in items {
            fields.push(item.as_ref());
        }
        fields
    }

    /// Room for `items` items of `bytes` bytes in all (a decoder that has
    /// measured the reply, `resp.rs`).
    pub(crate) fn with_capacity(items: usize, bytes: usize) -> SeatFields {
        SeatFields {
            bytes: Vec::with_capacity(bytes),
            ends: Vec::with_capacity(items),
        }
    }

    /// Appends one item (a field, or its value after it).
    pub(crate) fn push(&mut self, item: &[u8]) {
        self.bytes.extend_from_slice(item);
        self.ends.push(self.bytes.len());
    }

    fn item(&self, i: usize) -> &[u8] {
        let start = if i == 0 { 0 } else { self.ends[i - 1] };
        &self.bytes[start..self.ends[i]]
    }

    /// `(field, value)` in reply order.
    pub fn pairs(&self) -> impl Iterator<Item = (&[u8], &[u8])> {
        (0..self.len()).map(|p| (self.item(2 * p), self.item(2 * p + 1)))
    }

    /// Number of fields.
    pub fn len(&self) -> usize {
        self.ends.len() / 2
    }

    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// One field's value, as text. A linear scan: for inspecting one
    /// showtime, not for sweeping.
    pub fn get(&self, seat: &str) -> Option<String> {
        self.pairs()
            .find(|(f, _)| *f == seat.as_bytes())
            .map(|(_, v)| String::from_utf8_lossy(v).into_owned())
    }

    /// Every field as text, for checks that look up many seats of one hash.
    pub fn to_map(&self) -> HashMap<String, String> {
        self.pairs()
            .map(|(f, v)| {
                (
                    String::from_utf8_lossy(f).into_owned(),
                    String::from_utf8_lossy(v).into_owned(),
                )
            })
            .collect()
    }
}

impl<K: AsRef<[u8]>, V: AsRef<[u8]>> FromIterator<(K, V)> for SeatFields {
    fn from_iter<I: IntoIterator<Item = (K, V)>>(pairs: I) -> SeatFields {
        let mut fields = SeatFields::default();
        for (k, v) in pairs {
            fields.push(k.as_ref());
            fields.push(v.as_ref());
        }
        fields
    }
}

impl<S: AsRef<str>> FromIterator<(ShowtimeId, S, Holding)> for Occupancy {
    fn from_iter<I: IntoIterator<Item = (ShowtimeId, S, Holding)>>(rows: I) -> Occupancy {
        let mut b = OccupancyBuilder::default();
        for (showtime, seat, holding) in rows {
            b.push(showtime, seat.as_ref(), holding);
        }
        b.finish()
    }
}

impl<S: AsRef<str>> FromIterator<(ShowtimeId, S, OrderStatus)> for Occupancy {
    fn from_iter<I: IntoIterator<Item = (ShowtimeId, S, OrderStatus)>>(rows: I) -> Occupancy {
        rows.into_iter()
            .map(|(showtime, seat, status)| (showtime, seat, Holding::Valid(status)))
            .collect()
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

    /// The jobs that share the daemon's pass over the seat hashes.
    pub const SEAT_JOBS: [Kind; 4] = [
        Kind::PaidSeats,
        Kind::MissingHashes,
        Kind::OrphanLocks,
        Kind::SoldOrphans,
    ];

    pub fn is_seat_job(self) -> bool {
        self != Kind::ExpiredOrders
    }

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

/// What one audited repair did (the `kind` column of `reconcile_fix`; the
/// job that did it is its `job` column).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FixAction {
    OrderCancelled,
    SeatSet,
    SeatReleased,
    HashRebuilt,
}

impl FixAction {
    pub const ALL: [FixAction; 4] = [
        FixAction::OrderCancelled,
        FixAction::SeatSet,
        FixAction::SeatReleased,
        FixAction::HashRebuilt,
    ];

    pub fn from_label(label: &str) -> Option<FixAction> {
        FixAction::ALL.into_iter().find(|a| a.label() == label)
    }

    pub const fn label(self) -> &'static str {
        match self {
            FixAction::OrderCancelled => "order_cancelled",
            FixAction::SeatSet => "seat_set",
            FixAction::SeatReleased => "seat_released",
            FixAction::HashRebuilt => "hash_rebuilt",
        }
    }
}

/// A per-seat compare-and-set: change `observed` (None = field absent) to `target`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SeatRepair {
    pub kind: Kind,
    pub seat: SeatNo,
    pub observed: Option<SeatState>,
    pub target: SeatState,
}

/// This replica's share of the showtimes: `id mod total == index`, with the
/// Euclidean remainder so that negative ids belong to a shard too.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shard {
    pub total: u32,
    pub index: u32,
}

impl Shard {
    pub const ALL: Shard = Shard { total: 1, index: 0 };

    pub fn covers(&self, showtime: i64) -> bool {
        showtime.rem_euclid(self.total as i64) == self.index as i64
    }

    /// Every shard of this shard's split, this one first, then the others
    /// in order after it (so replicas try each other's shards in turn).
    pub fn all_from_here(&self) -> Vec<Shard> {
        (0..self.total)
            .map(|i| Shard {
                total: self.total,
                index: (self.index + i) % self.total,
            })
            .collect()
    }

    /// `2-of-3`: the shard in key names and the `shard` label's value is
    /// its index alone.
    pub fn name(&self) -> String {
        format!("{}-of-{}", self.index, self.total)
    }
}

/// The showtimes a run reads: those of one shard and, when `only` is not
/// empty, only those ids (`--showtime`). Passed to every store read that
/// pages over showtimes or orders, so which shard is swept is never implied.
#[derive(Debug, Clone, Copy)]
pub struct Scope<'a> {
    pub shard: Shard,
    pub only: &'a [ShowtimeId],
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
    fn template_finds_seats_in_and_out_of_order() {
        let t = Template::new(vec!["A-1".into(), "A-2".into(), "B-1".into()]);
        assert_eq!(t.find_near(b"A-2", 1), Some(1));
        assert_eq!(t.find_near(b"B-1", 0), Some(2));
        assert_eq!(t.find_near(b"A-1", 9), Some(0));
        assert_eq!(t.find(b"Z-9"), None);
    }

    #[test]
    fn seat_fields_keep_reply_order_and_bytes() {
        let f: SeatFields = [("A-1", "0"), ("A-2", "2")].into_iter().collect();
        assert_eq!(f.len(), 2);
        assert_eq!(f.get("A-2").as_deref(), Some("2"));
        assert_eq!(f.get("A-3"), None);
        let pairs: Vec<_> = f.pairs().collect();
        assert_eq!(
            pairs,
            vec![(&b"A-1"[..], &b"0"[..]), (&b"A-2"[..], &b"2"[..])]
        );
        assert_eq!(SeatFields::from_items(&[b"A-1".to_vec()]).len(), 0);
    }

    #[test]
    fn seat_fields_in_one_buffer_keep_empty_items_and_drop_a_dangling_one() {
        let flat: Vec<&[u8]> = vec![b"A-1", b"", b"", b"1", b"B-1", b"2", b"dangling"];
        let f = SeatFields::from_items(&flat);
        assert_eq!(f.len(), 3);
        assert!(!f.is_empty());
        let pairs: Vec<_> = f.pairs().collect();
        assert_eq!(
            pairs,
            vec![
                (&b"A-1"[..], &b""[..]),
                (&b""[..], &b"1"[..]),
                (&b"B-1"[..], &b"2"[..]),
            ]
        );
        // Built from pairs or from the flat reply: the same hash.
        let from_pairs: SeatFields = [("A-1", ""), ("", "1"), ("B-1", "2")].into_iter().collect();
        assert_eq!(f, from_pairs);
        assert_eq!(f.to_map().get("").map(String::as_str), Some("1"));
        assert!(SeatFields::from_items::<&[u8]>(&[]).is_empty());
        assert_eq!(SeatFields::from_items(&[b"only"]), SeatFields::default());
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
