//! The pure half of change-driven checks: `queue.rs` decides what is due,
//! `events.rs` reads keyspace messages and the probe, `marker.rs` tells a
//! loss of Redis' data by its data markers. What the daemon's tasks share,
//! and the tasks themselves, are the product's (`changes`, `change_watch`).

pub mod events;
pub mod marker;
pub mod queue;
