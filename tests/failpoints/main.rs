//! The failpoint tests, in a process of their own. Each pauses a run in one
//! of the product's race windows or fails its fault point
//! (`seatflow_test_support::races::Races`, failpoints of the `fail` crate),
//! and failpoints are global to the process: an armed window catches the
//! first run that reaches it, whichever test's it is. So every test here
//! holds a `Races` for as long as it runs a job, which serialises them, and
//! no other test shares the process: the other integration tests are in
//! `tests/it` (see its `main.rs`).

mod audit_backlog;
mod own_keys;
mod races;
