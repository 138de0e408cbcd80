//! seatflow-reconciler: finds and repairs drift between seatflow's Redis
//! seat hashes and its MySQL orders. See ARCHITECTURE.md for the map.

// Rule 16: nothing in the product may panic on data it did not create.
// Tests may; the product says why instead (`clippy.toml` bans sqlx's
// panicking `Row::get` too).
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

// First: the `race_window!` macro it defines is used by the modules below.
#[macro_use]
pub mod race_window;

pub mod config;
pub mod daemon;
pub mod error;
pub mod metrics;
pub mod ops;
pub mod run;
pub mod store;

// The pure decisions, a crate of their own whose Cargo.toml names no I/O
// crate (ARCHITECTURE.md, "Dependency rules"), at their old paths.
pub use seatflow_core::{capacity, model, pace, pass_fit, plan, repeats, schedule};
