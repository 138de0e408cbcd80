//! I/O at the edges: one file per store.
pub mod mysql;
pub mod redis;
