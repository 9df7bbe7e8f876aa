//! Standard output for the commands that print: a reader that went away (`asyncflow task list |
//! head -1`, a closed pipe of a supervisor) makes the rest of the output go nowhere instead of a
//! panic in `println!`. Use [`outln!`](crate::outln) and [`out!`](crate::out).

use std::io::Write;

/// Writes `args` and a newline to stdout; a write that fails (stdout closed) is dropped.
pub fn line(args: std::fmt::Arguments<'_>) {
    let mut stdout = std::io::stdout().lock();
    let _ = stdout.write_fmt(args).and_then(|()| stdout.write_all(b"\n"));
}

/// Writes `args` to stdout and flushes it (a progress line); a failed write is dropped.
pub fn part(args: std::fmt::Arguments<'_>) {
    let mut stdout = std::io::stdout().lock();
    let _ = stdout.write_fmt(args).and_then(|()| stdout.flush());
}

/// `println!` that never panics on a closed stdout ([`line`]).
#[macro_export]
macro_rules! outln {
    () => { $crate::out::line(format_args!("")) };
    ($($arg:tt)*) => { $crate::out::line(format_args!($($arg)*)) };
}

/// `print!` (flushed) that never panics on a closed stdout ([`part`]).
#[macro_export]
macro_rules! out {
    ($($arg:tt)*) => { $crate::out::part(format_args!($($arg)*)) };
}
