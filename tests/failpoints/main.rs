//! The failpoint tests, in a process of their own. Each pauses a run in one
//! of the product's race windows or fails its fault point
//! (`seatflow_test_support::races::Races`, failpoints of the `fail` crate),
//! and failpoints are global to the process: an armed window catches the
//! first run that reaches it, whichever test's it is. So every test here
//! holds a `Races` for as long as it runs a job, which serialises them, and
//! no other test shares the process: the other integration tests are in
//! `tests/it` (see its `main.rs`).
//!
//! This directory is a package of its own, `seatflow-failpoint-tests`
//! (its `Cargo.toml`): the only one that builds the product with its
//! `failpoints` feature and the support crate with `races`. Run it with
//! `cargo test -p seatflow-failpoint-tests [NAME]`, in an invocation of its
//! own (cargo unifies features within one: `tests/README.md`). A new race
//! test goes in `races.rs`, its window in the product's
//! `src/race_window.rs`.

mod audit_backlog;
mod own_keys;
mod races;
