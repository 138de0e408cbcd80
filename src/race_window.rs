//! Race windows: the points between a decision and the write it leads to,
//! where seatflow (or a second reconciler) can move under a run. Tests pause
//! a run at one of them, make the application's move there and check that
//! the guarding safety rule held (tests/failpoints/races.rs).
//!
//! Each window is a failpoint of the `fail` crate, compiled in only with the
//! `failpoints` feature, which only the failpoint tests' package
//! (tests/failpoints) turns on: in any other build, the other tests' too,
//! `race_window!` expands to nothing.

/// A chunk's occupancy read: its orders are read; next, its rows, in the
/// same snapshot (a payment or a cancel committed here is in neither).
pub const OCCUPANCY_BETWEEN_READS: &str = "occupancy-between-reads";

/// Seat jobs: the showtimes are scanned, planned and leased; next, the seats
/// to repair are re-read in MySQL (rule 4's confirmation).
pub const SEAT_BEFORE_CONFIRM: &str = "seat-sweep-before-confirm";

/// Seat jobs: the confirmation passed and the showtime leases were renewed; next,
/// the fenced compare-and-set script (rules 1, 2 and 13).
pub const SEAT_BEFORE_REPAIR: &str = "seat-sweep-before-repair";

/// missing-hashes: the showtime is leased, its seats read in MySQL and the
/// lease renewed; next, the fenced script that creates the hash from that
/// read only if it is still missing (rules 1, 2 and 13; the contract's
/// "never clobber a hash that appeared meanwhile").
pub const SEAT_BEFORE_REBUILD: &str = "seat-sweep-before-rebuild";

/// expired-orders: the showtime leases are taken; next, the conditional cancel
/// in MySQL (rule 3).
pub const EXPIRED_BEFORE_CANCEL: &str = "expired-orders-before-cancel";

/// expired-orders, inside the cancel's transaction: the expired orders are
/// read and row-locked (`SELECT … FOR UPDATE`); next, their conditional
/// UPDATE. seatflow's payment of one of them waits for the commit here.
pub const EXPIRED_CANCEL_ROWS_LOCKED: &str = "expired-orders-cancel-rows-locked";

/// expired-orders: the cancel is committed; next, the confirmation of its seats
/// in MySQL (rule 15) and their `"1"` → `"0"` in Redis, still under the
/// showtime leases (rules 1 and 2).
pub const EXPIRED_AFTER_CANCEL: &str = "expired-orders-after-cancel";

/// A fault, not a pause: the conditional cancel has committed, and tests
/// make its reply get lost here (a transient error), as a dropped
/// connection would. The retry must recognise the commit as its own (rules
/// 9 and 10: cancelled and audited once).
pub const CANCEL_REPLY_LOST: &str = "mysql-cancel-reply-lost";

/// A fault: the reply to the audit backlog's read is lost (a dropped
/// connection), after Redis ran it. No row may be lost for it (rule 10):
/// the rows leave the backlog only once MySQL has them.
pub const AUDIT_BACKLOG_READ_LOST: &str = "audit-backlog-read-reply-lost";

/// A fault: the audit backlog's rows are in MySQL, and the request that
/// removes them from Redis is lost before it arrives. The next drain writes
/// them again, harmlessly (`fix_id`), and removes them.
pub const AUDIT_BACKLOG_ACK_LOST: &str = "audit-backlog-ack-lost";

/// What a fault point returns: the connection dropped, and `what` with it.
#[cfg(feature = "failpoints")]
pub fn connection_reset(what: &str) -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::ConnectionReset,
        format!("{what} (failpoint)"),
    )
}

/// Marks a race window (one of the constants above).
macro_rules! race_window {
    ($name:expr) => {
        #[cfg(feature = "failpoints")]
        fail::fail_point!($name);
    };
}
