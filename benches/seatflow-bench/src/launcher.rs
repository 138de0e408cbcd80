//! The measured child process.
//!
//! Peak RSS comes from `wait4`'s rusage, with one trap: at exec, Linux folds
//! the high-water RSS of the memory the process had *before* exec into its
//! `ru_maxrss`, and a child spawned with posix_spawn (or vfork) shares its
//! parent's memory until exec. Spawned from this process (hundreds of MB after
//! seeding and verifying), every reconciler would seem to peak at our size.
//! So the reconciler is started by a launcher: this same binary re-executed
//! with LAUNCHER_ENV set, which branches off at the top of `main` before
//! allocating much, spawns the reconciler, reaps it with `wait4` and reports
//! on a marker line of stderr. The launcher's own high-water mark (a few MB)
//! is the floor under the measurement, and is reported with it.

use std::io::Read as _;
use std::os::unix::process::ExitStatusExt as _;
use std::path::Path;
use std::process::{Command, ExitCode, Stdio};
use std::time::Instant;

use anyhow::{Context as _, Result, bail};
use serde::Serialize;

/// Set in the environment of the launcher (see the module comment).
pub const LAUNCHER_ENV: &str = "SEATFLOW_BENCH_LAUNCHER";
/// Prefix of the launcher's report line on stderr.
const MEASURE_MARKER: &str = "seatflow-bench-measured: ";

/// What the launcher measured of one reconciler process.
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct Measured {
    /// From spawning the process to reaping it.
    pub wall_s: f64,
    pub exit_code: Option<i32>,
    /// `ru_maxrss`: peak resident set size.
    pub peak_rss_mb: f64,
    /// User + system CPU time.
    pub cpu_s: f64,
    /// The launcher's own peak RSS: `peak_rss_mb` cannot be lower than this.
    pub launcher_rss_mb: f64,
}

/// Launcher mode: argv is `<program> <args…>`; stdout and stderr are inherited.
pub fn launcher_main() -> ExitCode {
    let mut argv = std::env::args_os().skip(1);
    let Some(program) = argv.next() else {
        eprintln!("launcher: no program given");
        return ExitCode::from(2);
    };
    let mut cmd = Command::new(program);
    cmd.args(argv).env_remove(LAUNCHER_ENV);
    match measure(cmd) {
        Ok(m) => {
            let line = serde_json::to_string(&m).expect("plain struct");
            eprintln!("\n{MEASURE_MARKER}{line}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("launcher: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Runs `cmd` to completion and reaps it with `wait4`, which, unlike
/// `Child::wait`, also returns the child's resource usage.
pub fn measure(mut cmd: Command) -> std::io::Result<Measured> {
    let launcher_rss_mb = own_peak_rss_mb();
    let started = Instant::now();
    let child = cmd.spawn()?;
    let (status, usage) = wait4(child.id())?;
    Ok(Measured {
        wall_s: started.elapsed().as_secs_f64(),
        exit_code: std::process::ExitStatus::from_raw(status).code(),
        // Linux reports ru_maxrss in kilobytes.
        peak_rss_mb: usage.ru_maxrss as f64 / 1024.0,
        cpu_s: timeval_s(usage.ru_utime) + timeval_s(usage.ru_stime),
        launcher_rss_mb,
    })
}

/// `VmHWM` of this process: its own peak RSS since exec, nothing inherited.
fn own_peak_rss_mb() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(0.0, |kb| kb / 1024.0)
}

pub struct ChildRun {
    pub measured: Measured,
    pub stdout: String,
    /// The reconciler's stderr, without the launcher's marker line.
    pub stderr: String,
}

/// Runs `reconciler args…` through the launcher, capturing its output.
/// Piped stderr also keeps the reconciler from drawing progress (and from
/// paying for the COUNT query behind it) when the benchmark runs on a terminal.
pub fn run_reconciler(mut launcher: Command) -> Result<ChildRun> {
    launcher
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = launcher.spawn().context("starting the launcher")?;
    let mut err_pipe = child.stderr.take().expect("piped stderr");
    let stderr_reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err_pipe.read_to_string(&mut s);
        s
    });
    let mut stdout = String::new();
    child
        .stdout
        .take()
        .expect("piped stdout")
        .read_to_string(&mut stdout)?;
    child.wait()?;
    let stderr = stderr_reader.join().unwrap_or_default();
    let Some((before, line)) = stderr.rsplit_once(MEASURE_MARKER) else {
        bail!(
            "the launcher reported no measurement; its stderr:\n{}",
            tail(&stderr, 40)
        );
    };
    Ok(ChildRun {
        measured: serde_json::from_str(line.trim())?,
        stdout,
        stderr: before.trim_end().to_string(),
    })
}

/// `wait4(2)` on our own child: its raw wait status and resource usage.
pub fn wait4(pid: u32) -> std::io::Result<(i32, libc::rusage)> {
    let mut status: libc::c_int = 0;
    // SAFETY: `rusage` is plain old data; all-zero is a valid value.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    loop {
        // SAFETY: `pid` is a child we spawned and have not reaped; both
        // pointers are valid for the duration of the call.
        let r = unsafe { libc::wait4(pid as libc::pid_t, &mut status, 0, &mut usage) };
        if r == pid as libc::pid_t {
            return Ok((status, usage));
        }
        let e = std::io::Error::last_os_error();
        if e.kind() != std::io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

pub fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

pub fn timeval_s(t: libc::timeval) -> f64 {
    t.tv_sec as f64 + t.tv_usec as f64 / 1e6
}

/// The repository root: the reconciler's source tree, two levels above this
/// crate (`benches/seatflow-bench`).
pub fn repo_root() -> &'static Path {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest.parent().and_then(Path::parent).unwrap_or(manifest)
}

#[cfg(test)]
mod tests {
    use super::tail;

    #[test]
    fn tail_keeps_the_last_lines() {
        assert_eq!(tail("a\nb\nc\n", 2), "b\nc");
        assert_eq!(tail("a", 5), "a");
        assert_eq!(tail("", 3), "");
    }
}
