//! The `stint` command: parses arguments ([`args`]), runs the subcommand's module
//! ([`commands`]), prints an error as one line naming the file, and exits 2 on any failure.
//! anyhow lives only in this crate; the libraries' errors are typed.

mod args;
mod cache;
mod commands;
mod export;
mod fmt;
mod input;

use std::process::ExitCode;

use args::{Cli, Command};
use clap::Parser;

/// mimalloc instead of glibc's malloc: a rewrite of a large program makes some 10^6 small
/// allocations (pieces, their fields and CFI) and frees them on other threads; glibc's bins,
/// consolidation and arena locks took ≈ 10 % of the calling thread's time on node.
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// mimalloc's `mi_option_purge_delay` (the index in `mi_option_t` of the mimalloc 3 that
/// libmimalloc-sys 0.1.49 builds; its Rust constants are mimalloc 2's): how long freed memory
/// stays committed before it goes back to the system.
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// Freed memory goes back to the system after 50 ms, not mimalloc's 1 s: a rewrite frees
/// each pass's data as the next begins, and with 1 s gdb's peak RSS grew 13 % over glibc's
/// (50 ms: 10 % below it; 0: more page faults, no CPU gained over glibc).
fn tune_allocator() {
    // SAFETY: setting an option by its index; mimalloc reads it when it next purges.
    unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, 50) }
}

fn main() -> ExitCode {
    tune_allocator();
    let cli = Cli::parse();
    let r = match cli.command {
        Command::Rewrite(a) => commands::rewrite::run(a),
        Command::Inspect(a) => commands::inspect::run(a),
        Command::Report(a) => commands::report::run(a),
        Command::Ctl(a) => commands::ctl::run(a),
        Command::Top(a) => commands::top::run(a),
        Command::Ls(a) => commands::ls::run(a),
        Command::Diff(a) => commands::diff::run(a),
        Command::Run(a) => commands::run::run(a),
        Command::Batch(a) => commands::batch::run(a),
        Command::Merge(a) => commands::merge::run(a),
        Command::Serve(a) => commands::serve::run(a),
        Command::Export(a) => commands::export::run(a),
    };
    match r {
        Ok(()) => ExitCode::SUCCESS,
        // A reader that went away (`stint report … | head`) is not an error.
        Err(e) if is_broken_pipe(&e) => ExitCode::SUCCESS,
        // `stint diff` printed its regressions: a gate's failure, not bad input.
        Err(e) if e.is::<commands::diff::Regressed>() => ExitCode::from(1),
        Err(e) => {
            eprintln!("{}", one_line(&e));
            ExitCode::from(2)
        }
    }
}

fn is_broken_pipe(e: &anyhow::Error) -> bool {
    let pipe = std::io::ErrorKind::BrokenPipe;
    e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>().is_some_and(|io| io.kind() == pipe)
            || c.downcast_ref::<serde_json::Error>().is_some_and(|j| j.io_error_kind() == Some(pipe))
    })
}

/// Errors print as `subject: problem: cause` on one line.
pub(crate) fn one_line(e: &anyhow::Error) -> String {
    let parts: Vec<String> = e.chain().map(|c| c.to_string()).collect();
    parts.join(": ").replace('\n', " ")
}

#[cfg(test)]
mod tests {
    /// Index 15 is the purge delay: mimalloc 3's default for it is 1000 ms (no test sets it).
    #[test]
    fn the_purge_delay_option_is_index_15() {
        if std::env::var_os("MIMALLOC_PURGE_DELAY").is_some() {
            return; // the environment set it
        }
        // SAFETY: reading an option by its index.
        assert_eq!(unsafe { libmimalloc_sys::mi_option_get(super::MI_OPTION_PURGE_DELAY) }, 1000);
    }
}
