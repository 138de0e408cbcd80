//! Progress of a long sweep on stderr, only when stderr is a terminal and
//! only once a job has run for a moment: short runs and logs stay clean.

use std::io::Write;
use std::time::{Duration, Instant};

/// A job shows progress only after running this long.
const DELAY: Duration = Duration::from_millis(500);
/// At most this often.
const EVERY: Duration = Duration::from_millis(200);

pub struct Progress {
    enabled: bool,
    /// The job(s) swept, as the CLI names them.
    label: String,
    /// What is counted: "showtimes" or "orders".
    unit: &'static str,
    started: Instant,
    last: Option<Instant>,
}

impl Progress {
    pub fn new(enabled: bool, label: String, unit: &'static str) -> Progress {
        Progress {
            enabled,
            label,
            unit,
            started: Instant::now(),
            last: None,
        }
    }

    /// `done` of `total` units scanned (showtimes, or orders), `fixed` so far.
    pub fn tick(&mut self, done: u64, total: Option<u64>, fixed: u64) {
        if !self.enabled || self.started.elapsed() < DELAY {
            return;
        }
        if self.last.is_some_and(|t| t.elapsed() < EVERY) {
            return;
        }
        self.last = Some(Instant::now());
        let of = total.map(|t| format!("/{t}")).unwrap_or_default();
        let mut err = std::io::stderr().lock();
        let _ = write!(
            err,
            "\r\x1b[K{}: {done}{of} {} scanned, {fixed} repairs",
            self.label, self.unit
        );
        let _ = err.flush();
    }

    /// Clears the progress line if one was drawn.
    pub fn finish(&mut self) {
        if self.last.is_some() {
            let mut err = std::io::stderr().lock();
            let _ = write!(err, "\r\x1b[K");
            let _ = err.flush();
        }
    }
}
