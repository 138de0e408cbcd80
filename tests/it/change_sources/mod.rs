//! The change sources: checks between passes, started by a Redis keyspace
//! notification, the end of a grace period or a deadline, or a commit read
//! from MySQL's binlog (and the binlog position kept in Redis). A test of a
//! new change source, or of how a source's gaps start a pass, goes here.
//! The daemon they run in comes from `seatflow_test_support::estate`.

mod binlog;
mod binlog_position;
mod changes;
