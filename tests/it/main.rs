//! The integration tests, in one crate: sqlx, redis, reqwest and the product
//! are linked once, not once per file. Each file here was a test crate of its
//! own (`tests/<name>.rs`) and is now a module, grouped in folders by
//! feature (`repairs`, `change_sources`, `daemon`, `operations`), so its
//! tests are named `<folder>::<name>::<test>`; cargo filters by substring:
//! `cargo test --test it cli::` runs what `cargo test --test cli` ran.
//! Helpers shared by several files live in the support crate
//! (`tests/support`, `seatflow-test-support`); no module imports another.
//!
//! # Failpoint tests: a crate of their own, `tests/failpoints`
//!
//! The race-window tests arm failpoints of the `fail` crate
//! (`seatflow_test_support::races::Races`), and failpoints are global to the
//! process: an armed window pauses, or a fault point fails, whichever run
//! reaches it first, in any test of the process. `Races` serialises the
//! tests that hold one, not the others. Here, a window paused for one test
//! would catch a run of a test of another module running at the same time
//! (and a failed fault point would fail that run instead), so those tests
//! would turn flaky and the failpoint test would check nothing. So every
//! test that arms a failpoint is in `tests/failpoints` (the race tests,
//! `races.rs`, and the own-keys test that pauses a run), a process where each
//! test holds a `Races`; two links instead of twenty-one. `Races::new`
//! refuses to run in any other test binary, so a failpoint test added here
//! fails at once rather than making others flaky. (One binary made airtight
//! would need every test of every module to hold a lock against the
//! failpoint tests.)
//!
//! # Other state of the process, checked when the crates were merged
//!
//! - Environment: no test sets a variable of its own process (`set_var`);
//!   the binary under test gets its variables on its `Command`.
//! - Logging: no test installs a global tracing subscriber; the product's
//!   `telemetry::init` runs in the binary only (a child process here).
//! - Metrics: each `Metrics` has a registry of its own; none is global.
//! - TLS: `TestEnv` installs rustls's ring provider as the process default,
//!   the same for every test (a second install is ignored).
//! - insta names a snapshot after its module path and keeps it beside the
//!   file: `operations::inspect`'s are
//!   `operations/snapshots/it__operations__inspect__*.snap`.
//! - proptest: `repairs::planner_props` keeps its regressions file beside it
//!   (see its config).
//! - The shared Redis and MariaDB: every test has its own database, key
//!   prefix and users, and the chaos test kills only its own reconcilers'
//!   connections (by client name and user), so tests of different modules
//!   run side by side as the tests of one file did. libtest still runs two
//!   at a time on 2 cores; only the pairs now mix modules.

mod change_sources;
mod daemon;
mod operations;
mod repairs;
