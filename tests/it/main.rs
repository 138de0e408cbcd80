//! The integration tests but the failpoint ones, in one crate: sqlx, redis,
//! reqwest and the product are linked once, not once per file. The files
//! are grouped in folders by feature (`tests/README.md` says what goes
//! where): `repairs`, `change_sources`, `daemon`, `operations`. A test is
//! named after its module path, `<folder>::<file>::<test>`, and cargo
//! filters by substring: `cargo test --test it repairs::` runs a folder,
//! `cargo test --test it safety::` a file. Helpers shared by several files
//! live in the support crate (`tests/support`, `seatflow-test-support`); no
//! module here imports from another.
//!
//! This crate is the product's own test target, built with the product as it
//! ships: its dev-dependency on the support crate leaves the `failpoints`
//! feature off, so no failpoint is compiled in, here or in the binary the
//! CLI and daemon tests start (cargo builds it in the same invocation).
//!
//! # Failpoint tests: a package of their own, `tests/failpoints`
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
//! `races.rs`, and the own-keys and audit-backlog tests that pause or fail a
//! run), a process where each test holds a `Races`. `Races::new` refuses to
//! run in any other test binary, and without the support crate's
//! `failpoints` feature (which only that package turns on) `races` is not
//! even compiled here, so a failpoint test added here fails at once rather
//! than making others flaky. (One binary made airtight would need every
//! test of every module to hold a lock against the failpoint tests.)
//!
//! That package (`seatflow-failpoint-tests`) builds the product with its
//! `failpoints` feature. Cargo unifies features within one invocation, so
//! the README's test command is two: `cargo test --workspace --exclude
//! seatflow-failpoint-tests && cargo test -p seatflow-failpoint-tests`.
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
