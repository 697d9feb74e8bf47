//! What the commands print on standard output, and what a closed one
//! means: `idem dlq list | head` stops the command quietly, as every Unix
//! tool does, instead of the panic `println!` makes of a broken pipe.

use std::fmt;
use std::io::{ErrorKind, Write as _};

/// Standard output was closed by its reader: the command has nothing left
/// to do, and ends successfully without a word (`cli::main`).
#[derive(Debug, thiserror::Error)]
#[error("standard output was closed")]
pub struct Closed;

/// Writes `text` to standard output and flushes it.
pub fn write(text: fmt::Arguments<'_>) -> anyhow::Result<()> {
    let mut stdout = std::io::stdout().lock();
    match stdout.write_fmt(text).and_then(|()| stdout.flush()) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == ErrorKind::BrokenPipe => Err(Closed.into()),
        Err(e) => Err(anyhow::anyhow!("cannot write to standard output: {e}")),
    }
}

/// `print!` that returns [`Closed`] (or another error writing) instead of
/// panicking: `out!("{x}")?`.
macro_rules! out {
    ($($arg:tt)*) => {
        $crate::output::write(format_args!($($arg)*))
    };
}

/// `println!` as [`out!`] is `print!`.
macro_rules! outln {
    () => {
        $crate::output::write(format_args!("\n"))
    };
    ($($arg:tt)*) => {
        $crate::output::write(format_args!("{}\n", format_args!($($arg)*)))
    };
}

pub(crate) use {out, outln};
