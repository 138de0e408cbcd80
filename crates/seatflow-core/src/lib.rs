//! seatflow-core: the reconciler's pure decisions, with no I/O. The
//! contract's model and its strict reading, the planner, the pace, the
//! pass's fit and capacity, the schedule's arithmetic, the change queue,
//! the keyspace events' and the data markers' verdicts, the key layout, the
//! grants' and the ACL's judgement, the replica's judgement, and the
//! RESP2 decoding of the sweep's reads of seat hashes.
//!
//! Pure by construction: this crate's Cargo.toml names no I/O crate (no
//! tokio, redis, sqlx, mysql_async, axum, hyper, reqwest; checked by
//! scripts/check_deps.py), so an import of one does not build. The
//! product (the root package) does the I/O and re-exports these modules at
//! their old paths (`seatflow_reconciler::model`, `::plan`, ...).

// Rule 16: nothing in the product may panic on data it did not create.
// Tests may; the product says why instead.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

pub mod capacity;
pub mod changes;
pub mod grants;
pub mod keys;
pub mod model;
pub mod pace;
pub mod pass_fit;
pub mod plan;
pub mod redis_acl;
pub mod repeats;
pub mod replica_lag;
pub mod resp;
pub mod schedule;
