//! Pausing a run in one of the product's race windows
//! (`seatflow_reconciler::race_window`) to make the application's move there.
//!
//! The run under test goes on a thread of its own, with its own runtime and
//! connections: a paused window blocks that thread (the failpoint's callback
//! is synchronous) while the test, on its own runtime, changes the stores and
//! then lets the run go on. Nothing depends on timing: the run stops exactly
//! in the window and waits there as long as the move takes.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, mpsc};
use std::time::Duration;

use seatflow_reconciler::config::Settings;
use seatflow_reconciler::model::Kind;
use seatflow_reconciler::run::context::Context;
use seatflow_reconciler::run::jobs::RunOptions;
use seatflow_reconciler::run::jobs::report::RunReport;

/// Only a guard against a test that hangs; no test waits this long when it passes.
const HANG_GUARD: Duration = Duration::from_secs(120);

/// The failpoints of one test. Failpoints are global to the process, so
/// `Races` also serialises the tests that use them (`fail::FailScenario`);
/// dropping it removes every window it armed.
///
/// It serialises only the tests that hold one: an armed window would catch a
/// run of any other test of the process. So `Races` works only in the test
/// binary of the failpoint tests (`tests/failpoints`), where every test holds
/// one (see `tests/it/main.rs`).
pub struct Races {
    _scenario: fail::FailScenario<'static>,
}

/// The crate whose test binary alone may arm failpoints.
const FAILPOINT_TESTS: &str = "failpoints";

impl Races {
    #[allow(clippy::new_without_default)]
    pub fn new() -> Races {
        let binary = test_binary();
        assert_eq!(
            binary, FAILPOINT_TESTS,
            "failpoints are global to the process: a test that arms one belongs \
             in tests/{FAILPOINT_TESTS}/, the only test binary whose every test \
             holds a `Races` (see tests/it/main.rs)"
        );
        Races {
            _scenario: fail::FailScenario::setup(),
        }
    }

    /// Runs `kinds` in the background (`BackgroundRun`), pauses the run in
    /// `window`, makes `the_move` there, lets the run go on and returns its
    /// report.
    pub async fn run_with_move(
        &self,
        settings: &Settings,
        window: &'static str,
        kinds: &[Kind],
        the_move: impl AsyncFnOnce(),
    ) -> RunReport {
        let mut paused = self.pause_once(window);
        let mut run = BackgroundRun::start(settings.clone(), kinds);
        run.paused_in(&mut paused).await;
        the_move().await;
        paused.resume();
        run.finish().await
    }

    /// Makes the next pass through the fault point `window` fail (its
    /// `fail_point!` returns its error), once.
    pub fn fail_once(&self, window: &'static str) {
        fail::cfg(window, "1*return").expect("failpoint");
    }

    /// Pauses the first run that reaches `window`; later arrivals pass
    /// through (so a second reconciler that wrongly gets there too is not
    /// stuck, and the test sees what it did instead).
    pub fn pause_once(&self, window: &'static str) -> Window {
        let (reached_tx, reached_rx) = tokio::sync::mpsc::unbounded_channel();
        let (resume_tx, resume_rx) = mpsc::channel::<()>();
        let resume_rx = Mutex::new(resume_rx);
        let armed = AtomicBool::new(true);
        fail::cfg_callback(window, move || {
            if armed.swap(false, Ordering::SeqCst) {
                let _ = reached_tx.send(());
                // Blocks the run's own thread until the test says go (or
                // drops the window).
                let _ = resume_rx.lock().unwrap().recv_timeout(HANG_GUARD);
            }
        })
        .expect("failpoint");
        Window {
            name: window,
            reached: reached_rx,
            resume: Some(resume_tx),
        }
    }
}

/// The crate of the running test binary: cargo names it `<crate>-<hash>`.
fn test_binary() -> String {
    let exe = std::env::current_exe().expect("the test binary's path");
    let name = exe
        .file_stem()
        .and_then(|n| n.to_str())
        .expect("a test binary named in UTF-8");
    name.rsplit_once('-')
        .map_or(name, |(krate, _hash)| krate)
        .to_string()
}

/// One armed window.
pub struct Window {
    name: &'static str,
    reached: tokio::sync::mpsc::UnboundedReceiver<()>,
    resume: Option<mpsc::Sender<()>>,
}

impl Window {
    /// Waits until a run is paused in the window.
    async fn reached(&mut self) {
        tokio::time::timeout(HANG_GUARD, self.reached.recv())
            .await
            .unwrap_or_else(|_| panic!("no run reached the window {}", self.name))
            .expect("window sender alive");
    }

    /// Lets the paused run go on.
    pub fn resume(&mut self) {
        if let Some(tx) = self.resume.take() {
            let _ = tx.send(());
        }
    }
}

impl Drop for Window {
    fn drop(&mut self) {
        self.resume();
        fail::remove(self.name);
    }
}

/// A run on a thread of its own: its own runtime and connections (as a
/// second reconciler process has), so a window that blocks it blocks
/// nothing of the test's.
pub struct BackgroundRun {
    report: tokio::sync::oneshot::Receiver<RunReport>,
}

impl BackgroundRun {
    pub fn start(settings: Settings, kinds: &[Kind]) -> BackgroundRun {
        let kinds = kinds.to_vec();
        let (tx, rx) = tokio::sync::oneshot::channel();
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let ctx = Context::connect(settings).await.expect("connect");
                let report = crate::run(&ctx, &kinds, RunOptions::default()).await;
                let _ = tx.send(report);
            });
        });
        BackgroundRun { report: rx }
    }

    /// Waits until this run is paused in `window`. A run that ends without
    /// getting there fails the test at once, with its report (not at the
    /// hang guard).
    pub async fn paused_in(&mut self, window: &mut Window) {
        tokio::select! {
            () = window.reached() => {}
            report = &mut self.report => panic!(
                "the run ended without reaching the window {}: {report:?}",
                window.name
            ),
        }
    }

    /// The run's report, once it has finished.
    pub async fn finish(self) -> RunReport {
        tokio::time::timeout(HANG_GUARD, self.report)
            .await
            .expect("the background run finished")
            .expect("the background run did not panic")
    }
}
