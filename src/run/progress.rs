//! Progress of a long `once` (and `migrate`) on stderr, drawn by
//! `indicatif`: a bar per job with the showtimes or orders done, the rate
//! and the time left.
//!
//! Only on a terminal: indicatif draws nothing to a stderr that is not one,
//! so logs captured to a file and `--output json` carry no trace of it.
//! Only once a job has run for [`DELAY`]: a short run stays one clean
//! report. Log lines are written above the bars ([`suspend`]), never into
//! them.

use std::borrow::Cow;
use std::io::Write as _;
use std::sync::mpsc;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use indicatif::{MultiProgress, ProgressBar, ProgressState, ProgressStyle};

/// A job shows progress only after running this long.
pub const DELAY: Duration = Duration::from_millis(500);

/// What a job counts, as its bar names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unit {
    Showtimes,
    Orders,
}

impl Unit {
    fn label(self) -> &'static str {
        match self {
            Unit::Showtimes => "showtimes",
            Unit::Orders => "orders",
        }
    }
}

/// Where bars are drawn, and where the line a finished one leaves goes.
#[derive(Clone)]
struct Bars {
    multi: MultiProgress,
    leave: Arc<dyn Fn(&str) + Send + Sync>,
}

impl Bars {
    /// stderr's: drawn only if it is a terminal.
    fn stderr() -> Bars {
        Bars {
            multi: MultiProgress::new(),
            leave: Arc::new(|line| {
                let _ = writeln!(std::io::stderr().lock(), "{line}");
            }),
        }
    }

    /// Writes `line` (what a finished bar leaves) above the bars still
    /// drawn; nothing where bars are not drawn.
    fn leave(&self, line: &str) {
        if !self.multi.is_hidden() {
            self.multi.suspend(|| (self.leave)(line));
        }
    }
}

/// The process's bars, on stderr: one place, so that a log line can step
/// around all of them.
static BARS: OnceLock<Bars> = OnceLock::new();

fn bars() -> &'static Bars {
    BARS.get_or_init(Bars::stderr)
}

/// Runs `write` (a log line to stderr) with the bars cleared, and draws
/// them again below it: a line is never cut by a bar nor a bar left in the
/// middle of the log.
pub fn suspend<R>(write: impl FnOnce() -> R) -> R {
    match BARS.get() {
        Some(bars) => bars.multi.suspend(write),
        None => write(),
    }
}

/// One job's bar: counted from its start, drawn from [`DELAY`] on.
pub struct Progress {
    /// None when progress is off (not a terminal, or not asked for).
    bar: Option<(ProgressBar, Bars)>,
    unit: Unit,
    started: Instant,
    delay: Duration,
    shown: bool,
    /// Whether the bar has its total (a bar) or not (a count).
    with_total: Option<bool>,
}

impl Progress {
    /// A bar for `label` (the job, as the CLI names it) on stderr when
    /// `enabled`.
    pub fn new(enabled: bool, label: &str, unit: Unit) -> Progress {
        Progress::on(enabled.then(bars).cloned(), label, unit, DELAY)
    }

    /// A bar among `bars` (none: no bar), drawn once `delay` has passed.
    fn on(bars: Option<Bars>, label: &str, unit: Unit, delay: Duration) -> Progress {
        // Hidden until shown, but counting from now: the rate and the time
        // left are the job's own, not those of its shown part.
        let bar = bars.map(|bars| {
            let bar = ProgressBar::hidden();
            bar.set_prefix(label.to_string());
            (bar, bars)
        });
        Progress {
            bar,
            unit,
            started: Instant::now(),
            delay,
            shown: false,
            with_total: None,
        }
    }

    /// `done` of `total` units scanned (showtimes, or orders), `fixed`
    /// repairs so far.
    pub fn tick(&mut self, done: u64, total: Option<u64>, fixed: u64) {
        let Some((bar, bars)) = &self.bar else {
            return;
        };
        if self.with_total != Some(total.is_some()) {
            bar.set_style(style(self.unit, total.is_some()));
            self.with_total = Some(total.is_some());
        }
        if let Some(total) = total {
            bar.set_length(total.max(done));
        }
        bar.set_position(done);
        bar.set_message(repairs(fixed));
        if !self.shown && self.started.elapsed() >= self.delay {
            self.shown = true;
            bars.multi.add(bar.clone()).tick();
        }
    }

    /// Replaces a shown bar by a line of its final count, rate and time
    /// taken, which stays above any bar that follows.
    pub fn finish(&mut self) {
        if let Some((bar, bars)) = self.bar.take()
            && self.shown
        {
            let line = final_line(
                &bar.prefix(),
                self.unit,
                bar.position(),
                bar.length().filter(|_| self.with_total == Some(true)),
                &bar.message(),
                self.started.elapsed(),
            );
            bar.finish_and_clear();
            bars.multi.remove(&bar);
            bars.leave(&line);
        }
    }
}

/// What a finished job leaves on the terminal: `expired-orders: 1/1 orders
/// · 1 repairs · 2/s · took 0.5s`.
fn final_line(
    label: &str,
    unit: Unit,
    done: u64,
    total: Option<u64>,
    message: &str,
    took: Duration,
) -> String {
    let of = total.map(|t| format!("/{t}")).unwrap_or_default();
    let rate = done as f64 / took.as_secs_f64().max(0.001);
    format!(
        "{label}: {done}{of} {} · {message} · {rate:.0}/s · took {}",
        unit.label(),
        short_duration(took)
    )
}

/// `0.5s`, `42.0s`, `3m07s`, `1h02m`.
fn short_duration(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        0..60 => format!("{:.1}s", d.as_secs_f64()),
        60..3600 => format!("{}m{:02}s", s / 60, s % 60),
        _ => format!("{}h{:02}m", s / 3600, s % 3600 / 60),
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.finish();
    }
}

/// "`n` repairs", the bar's message.
fn repairs(fixed: u64) -> Cow<'static, str> {
    format!("{fixed} repairs").into()
}

/// The bar's look: with a total, a bar with the time left; without, a
/// count with the time so far.
fn style(unit: Unit, with_total: bool) -> ProgressStyle {
    let unit = unit.label();
    let template = if with_total {
        format!(
            "{{prefix}} [{{bar:25}}] {{pos}}/{{len}} {unit} · {{msg}} · {{rate}} · {{eta}} left"
        )
    } else {
        format!("{{prefix}} {{pos}} {unit} · {{msg}} · {{rate}} · {{elapsed}}")
    };
    ProgressStyle::with_template(&template)
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .progress_chars("=> ")
        .with_key("rate", |s: &ProgressState, w: &mut dyn std::fmt::Write| {
            let _ = write!(w, "{:.0}/s", s.per_sec());
        })
}

/// A step without counts (a migration) shown as a spinner with the time
/// it has taken, once it has run for [`DELAY`].
pub struct Activity {
    bar: ProgressBar,
    bars: Option<Bars>,
    started: Instant,
    done: Option<mpsc::Sender<()>>,
    shown: Option<std::thread::JoinHandle<bool>>,
}

impl Activity {
    /// `label: what`, on stderr when `enabled`.
    pub fn start(enabled: bool, label: &str, what: &str) -> Activity {
        Activity::on(enabled.then(bars).cloned(), label, what, DELAY)
    }

    fn on(bars: Option<Bars>, label: &str, what: &str, delay: Duration) -> Activity {
        let bar = ProgressBar::hidden();
        bar.set_style(
            ProgressStyle::with_template("{prefix} {spinner} {msg} · {elapsed}")
                .unwrap_or_else(|_| ProgressStyle::default_spinner()),
        );
        bar.set_prefix(label.to_string());
        bar.set_message(what.to_string());
        let started = Instant::now();
        let Some(bars) = bars else {
            return Activity {
                bar,
                bars: None,
                started,
                done: None,
                shown: None,
            };
        };
        let (done, finished) = mpsc::channel::<()>();
        let (shown_bar, shown_bars) = (bar.clone(), bars.clone());
        // Shown only if the step is still going after the delay.
        let shown = std::thread::spawn(move || {
            if finished.recv_timeout(delay) != Err(mpsc::RecvTimeoutError::Timeout) {
                return false;
            }
            let bar = shown_bars.multi.add(shown_bar);
            bar.enable_steady_tick(Duration::from_millis(120));
            true
        });
        Activity {
            bar,
            bars: Some(bars),
            started,
            done: Some(done),
            shown: Some(shown),
        }
    }

    /// Ends the step: a shown spinner becomes a line with the time taken.
    pub fn finish(mut self) {
        self.stop();
    }

    fn stop(&mut self) {
        if let Some(done) = self.done.take() {
            let _ = done.send(());
        }
        let shown = self.shown.take().is_some_and(|h| h.join().unwrap_or(false));
        if shown && let Some(bars) = &self.bars {
            let line = format!(
                "{}: {} · took {}",
                self.bar.prefix(),
                self.bar.message(),
                short_duration(self.started.elapsed())
            );
            self.bar.finish_and_clear();
            bars.multi.remove(&self.bar);
            bars.leave(&line);
        }
    }
}

impl Drop for Activity {
    fn drop(&mut self) {
        self.stop();
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use indicatif::{ProgressDrawTarget, TermLike};

    use super::*;

    /// A terminal that keeps every line written to it.
    #[derive(Debug, Clone, Default)]
    struct Screen(Arc<Mutex<Vec<String>>>);

    impl Screen {
        fn text(&self) -> String {
            self.0.lock().unwrap().join("\n")
        }

        fn bars(&self) -> Bars {
            let screen = self.clone();
            Bars {
                multi: MultiProgress::with_draw_target(ProgressDrawTarget::term_like(Box::new(
                    self.clone(),
                ))),
                leave: Arc::new(move |line| screen.0.lock().unwrap().push(line.to_string())),
            }
        }
    }

    impl TermLike for Screen {
        fn width(&self) -> u16 {
            160
        }
        fn move_cursor_up(&self, _: usize) -> std::io::Result<()> {
            Ok(())
        }
        fn move_cursor_down(&self, _: usize) -> std::io::Result<()> {
            Ok(())
        }
        fn move_cursor_right(&self, _: usize) -> std::io::Result<()> {
            Ok(())
        }
        fn move_cursor_left(&self, _: usize) -> std::io::Result<()> {
            Ok(())
        }
        fn write_line(&self, s: &str) -> std::io::Result<()> {
            self.0.lock().unwrap().push(s.to_string());
            Ok(())
        }
        fn write_str(&self, s: &str) -> std::io::Result<()> {
            self.write_line(s)
        }
        fn clear_line(&self) -> std::io::Result<()> {
            Ok(())
        }
        fn flush(&self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// A bar on `screen`, shown from its first tick.
    fn shown(screen: &Screen, label: &str, unit: Unit) -> Progress {
        Progress::on(Some(screen.bars()), label, unit, Duration::ZERO)
    }

    #[test]
    fn a_job_shorter_than_the_delay_draws_nothing() {
        let screen = Screen::default();
        let mut p = Progress::on(
            Some(screen.bars()),
            "paid-seats",
            Unit::Showtimes,
            Duration::from_secs(3600),
        );
        p.tick(5, Some(10), 1);
        p.tick(10, Some(10), 2);
        p.finish();
        assert_eq!(screen.text(), "");
    }

    #[test]
    fn a_long_job_draws_its_counts_rate_and_time_left() {
        let screen = Screen::default();
        let mut p = shown(&screen, "paid-seats+orphan-locks", Unit::Showtimes);
        p.tick(400, Some(1000), 7);
        let drawn = screen.text();
        assert!(drawn.contains("paid-seats+orphan-locks ["), "{drawn}");
        assert!(
            drawn.contains("400/1000 showtimes · 7 repairs · "),
            "{drawn}"
        );
        assert!(
            drawn.contains("/s · ") && drawn.contains(" left"),
            "{drawn}"
        );
        p.tick(1000, Some(1000), 9);
        p.finish();
        let drawn = screen.text();
        let last = drawn
            .lines()
            .rfind(|l| !l.trim().is_empty())
            .unwrap_or_default();
        assert!(
            last.starts_with("paid-seats+orphan-locks: 1000/1000 showtimes · 9 repairs · "),
            "{drawn}"
        );
        assert!(last.contains("/s · took "), "{drawn}");
    }

    #[test]
    fn without_a_total_the_count_and_rate_are_drawn() {
        let screen = Screen::default();
        let mut p = shown(&screen, "expired-orders", Unit::Orders);
        p.tick(200, None, 3);
        p.finish();
        let drawn = screen.text();
        assert!(
            drawn.contains("expired-orders 200 orders · 3 repairs · "),
            "{drawn}"
        );
        assert!(drawn.contains("/s"), "{drawn}");
    }

    #[test]
    fn the_final_line_says_what_was_done_how_fast_and_how_long() {
        let line = final_line(
            "expired-orders",
            Unit::Orders,
            50,
            Some(50),
            "2 repairs",
            Duration::from_millis(2500),
        );
        assert_eq!(
            line,
            "expired-orders: 50/50 orders · 2 repairs · 20/s · took 2.5s"
        );
        assert_eq!(short_duration(Duration::from_secs(187)), "3m07s");
        assert_eq!(short_duration(Duration::from_secs(3720)), "1h02m");
    }

    #[test]
    fn progress_that_is_off_draws_nothing_and_costs_nothing() {
        let mut p = Progress::on(None, "sold-orphans", Unit::Showtimes, Duration::ZERO);
        p.tick(1, Some(2), 0);
        p.finish();
        assert!(p.bar.is_none());
    }

    #[test]
    fn an_activity_is_shown_only_past_the_delay() {
        let screen = Screen::default();
        let quick = Activity::on(
            Some(screen.bars()),
            "migrate",
            "applying",
            Duration::from_secs(3600),
        );
        quick.finish();
        assert_eq!(screen.text(), "");

        let slow = Activity::on(Some(screen.bars()), "migrate", "applying", Duration::ZERO);
        // Shown by its thread at once (delay 0): wait for that, bounded.
        let until = Instant::now() + Duration::from_secs(30);
        while screen.text().is_empty() && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(10));
        }
        slow.finish();
        let drawn = screen.text();
        assert!(drawn.contains("migrate: applying · took "), "{drawn}");
    }
}
