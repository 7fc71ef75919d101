//! `stint rewrite`: read the input and the spec, call [`stint_rewrite::rewrite`], write the
//! output (and the rewrite report) so that a failed run never leaves a half-written file.

use std::io::Write;
use std::path::Path;
use std::time::Instant;

use anyhow::anyhow;

use crate::args::RewriteArgs;
use crate::cache::write_atomically;
use crate::input::{absolute_input, load_spec, program_name, read_input};

pub fn run(a: RewriteArgs) -> anyhow::Result<()> {
    let start = Instant::now();
    let mut spec = load_spec(&a.spec)?;
    spec.sampling |= a.sampling;
    let data = read_input(&a.input)?;
    let program = program_name(&a.input);
    let input = absolute_input(&a.input);
    let opts = stint_rewrite::Options { program: &program, input: input.as_deref(), spec: &spec, traps: a.traps };
    let mode = std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&a.input)?.permissions());
    let mut progress = Progress::new(&a.input, start, !a.quiet);
    // The output is written while the library builds the rewrite report on another core.
    let res = stint_rewrite::rewrite_then(&data, &opts, &mut |phase| progress.phase(phase), |out| {
        write_atomically(&a.output, &out, (mode & 0o777) | 0o100).map(|()| out.len())
    });
    progress.clear();
    let (written, report) = res.map_err(|e| anyhow!("{}: {e}", a.input.display()))?;
    let out_len = written?;
    if let Some(rp) = &a.report {
        let json = serde_json::to_string_pretty(&report)?;
        write_atomically(rp, json.as_bytes(), 0o644)?;
    }
    if !a.quiet {
        let s = &report.summary;
        eprintln!(
            "stint: {}: {} functions, {} of {} entries patched ({:.2}%), {} skipped; wrote {} ({:.1} KiB) in {:.2} s",
            a.input.display(),
            s.functions,
            s.patched,
            s.entries,
            s.entry_coverage_pct,
            s.skipped,
            a.output.display(),
            out_len as f64 / 1024.0,
            start.elapsed().as_secs_f64()
        );
        if s.trap_sites > 0 {
            let wrapped =
                if s.signal_wrappers.is_empty() { "none imported".into() } else { s.signal_wrappers.join(", ") };
            eprintln!(
                "stint: {}: {} sites need a trap; signal functions wrapped to keep SIGTRAP safe: {wrapped}",
                a.input.display(),
                s.trap_sites
            );
        }
    }
    Ok(())
}

/// The pass a long rewrite is in, on one line of a terminal's stderr: shown from the first
/// pass that starts more than a second into the run, erased at the end; never when stderr
/// is not a terminal (pipes, logs, CI), with `--quiet`, or on a dumb terminal.
struct Progress {
    input: String,
    start: Instant,
    enabled: bool,
    shown: bool,
}

impl Progress {
    fn new(input: &Path, start: Instant, verbose: bool) -> Self {
        use std::io::IsTerminal;
        let dumb = std::env::var_os("TERM").is_none_or(|t| t == "dumb");
        let ci = std::env::var_os("CI").is_some_and(|v| !v.is_empty() && v != "false");
        let enabled = verbose && !dumb && !ci && std::io::stderr().is_terminal();
        Progress { input: input.display().to_string(), start, enabled, shown: false }
    }

    fn phase(&mut self, phase: stint_rewrite::Phase) {
        if !self.enabled || phase == stint_rewrite::Phase::Done || self.start.elapsed().as_secs_f64() < 1.0 {
            return;
        }
        let mut e = std::io::stderr().lock();
        let _ = write!(
            e,
            "\r\x1b[2Kstint: rewriting {}: {} ({:.1} s)",
            self.input,
            phase.name(),
            self.start.elapsed().as_secs_f64()
        );
        let _ = e.flush();
        self.shown = true;
    }

    fn clear(&mut self) {
        if self.shown {
            let _ = write!(std::io::stderr().lock(), "\r\x1b[2K");
            self.shown = false;
        }
    }
}
