//! What the commands print on stdout (`once`, `inspect`, `check-config`,
//! the demo's tour). A reader that goes away (`once --output json | head`)
//! is no failure of ours: the rest of the output is dropped quietly.
//! `println!` would panic there (Rust ignores SIGPIPE, so a write to a
//! closed pipe fails with `BrokenPipe`), and the default SIGPIPE is no
//! option: the same process talks to servers over sockets. Any other
//! failure to write is said once on stderr.

use std::io::Write as _;
use std::sync::atomic::{AtomicBool, Ordering};

/// Said once: stdout could not be written for another reason than a
/// reader gone.
static SAID: AtomicBool = AtomicBool::new(false);

/// Writes `args` to stdout; see the module comment for what a failure does.
pub fn write(args: std::fmt::Arguments<'_>) {
    let result = std::io::stdout().lock().write_fmt(args);
    if let Err(e) = result
        && e.kind() != std::io::ErrorKind::BrokenPipe
        && !SAID.swap(true, Ordering::SeqCst)
    {
        eprintln!("could not write to stdout: {e}");
    }
}

/// `print!` on stdout that ends quietly when its reader is gone.
#[macro_export]
macro_rules! out {
    ($($arg:tt)*) => {
        $crate::ops::stdout::write(format_args!($($arg)*))
    };
}

/// `println!` on stdout that ends quietly when its reader is gone.
#[macro_export]
macro_rules! outln {
    () => {
        $crate::ops::stdout::write(format_args!("\n"))
    };
    ($($arg:tt)*) => {
        $crate::ops::stdout::write(format_args!("{}\n", format_args!($($arg)*)))
    };
}
