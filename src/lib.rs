//! seatflow-reconciler: finds and repairs drift between seatflow's Redis
//! seat hashes and its MySQL orders. See ARCHITECTURE.md for the map.

pub mod config;
pub mod demo;
pub mod error;
pub mod fixtures;
pub mod jobs;
pub mod lease;
pub mod model;
pub mod plan;
pub mod retry;
pub mod store;
pub mod telemetry;
