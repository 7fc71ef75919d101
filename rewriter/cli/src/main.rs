//! The `stint` command: parses arguments, calls the library, prints errors as one line
//! naming the file, exits 2 on any failure.

mod commands;

use anyhow::{anyhow, Context};
use clap::{Parser, Subcommand, ValueEnum};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

#[derive(Parser, Debug)]
#[command(
    name = "stint",
    version,
    about = "Static instrumentation of threads: rewrite an x86-64 executable so it measures every thread",
    after_help = "EXAMPLES:\n  \
      stint rewrite /usr/bin/pigz -o ./pigz.stint\n  \
      STINT_PROFILE=/tmp/pigz.%p.stint ./pigz.stint -p 2 -c big.txt > big.gz\n  \
      stint report /tmp/pigz.1234.stint\n  \
      stint report /tmp/pigz.1234.stint --format json\n  \
      stint inspect /usr/bin/pigz --json"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    Rewrite(RewriteArgs),
    Inspect(InspectArgs),
    Report(ReportArgs),
    /// Control a running rewritten program: status, enable / disable metrics per function
    /// and thread, snapshot a baseline.
    Ctl(commands::ctl::Args),
    /// Live view of a running program's profile: threads, states, top functions, lock waits.
    Top(commands::top::Args),
    /// List the live profiles of this user's processes.
    Ls(commands::ls::Args),
}

/// Write an instrumented copy of an executable.
#[derive(Parser, Debug)]
#[command(after_help = "EXAMPLES:\n  \
    stint rewrite ./server -o ./server.stint\n  \
    stint rewrite ./server -o ./server.stint --spec my-spec.yaml\n\n\
    The output behaves like the input. When it runs it writes a profile file, named by\n\
    STINT_PROFILE (%p becomes the pid; default ./<program>.<pid>.stint); set STINT_PROFILE=\n\
    (empty) to run without measuring.")]
struct RewriteArgs {
    /// The executable to rewrite.
    input: PathBuf,
    /// Where to write the rewritten executable.
    #[arg(short, long)]
    output: PathBuf,
    /// Metric spec (YAML); the built-in default counts calls of every function.
    #[arg(long)]
    spec: Option<PathBuf>,
    /// Also write the rewrite report (JSON) to this file.
    #[arg(long)]
    report: Option<PathBuf>,
    /// Print nothing on success.
    #[arg(short, long)]
    quiet: bool,
    /// Use int3 + SIGTRAP where no jump fits (exact but slow; a thread that blocks SIGTRAP is
    /// killed when it hits one; debuggers stop at every trap).
    #[arg(long)]
    traps: bool,
}

/// Show what `rewrite` would instrument, and how.
#[derive(Parser, Debug)]
#[command(after_help = "EXAMPLES:\n  stint inspect /usr/bin/pigz\n  stint inspect /usr/bin/pigz --json | jq .summary")]
struct InspectArgs {
    input: PathBuf,
    /// Print the full report as JSON (functions, points with tactics, summary).
    #[arg(long)]
    json: bool,
    /// List every skipped entry with its reason.
    #[arg(long)]
    skipped: bool,
    #[arg(long)]
    spec: Option<PathBuf>,
    /// Use int3 + SIGTRAP where no jump fits (exact but slow; a thread that blocks SIGTRAP is
    /// killed when it hits one; debuggers stop at every trap).
    #[arg(long)]
    traps: bool,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum Format {
    Table,
    Json,
}

/// What the table of `stint report` is arranged by.
#[derive(Clone, Copy, Debug, ValueEnum)]
enum By {
    /// Per thread, the functions it called: calls, CPU and wall time.
    Function,
    /// One row per thread: name, start routine, creator, lifetime, exit, % of time per state,
    /// total wait.
    Thread,
    /// Per sync object (mutex, condvar, …): the threads that waited on it, with counts,
    /// contended calls, wait and hold time.
    Lock,
}

/// Show the per-thread profile a rewritten program wrote.
#[derive(Parser, Debug)]
#[command(after_help = "EXAMPLES:\n  \
    stint report /tmp/pigz.1234.stint\n  \
    stint report /tmp/pigz.1234.stint --top 20\n  \
    stint report /tmp/pigz.1234.stint --by lock      # which locks threads waited on, and how long\n  \
    stint report /tmp/pigz.1234.stint --by thread    # lifetimes, exits, % of time per state\n  \
    stint report /tmp/pigz.1234.stint --format json  # everything, whatever --by says\n  \
    stint report /tmp/pigz.1234.stint --since-snapshot  # only what came after `stint ctl ... snapshot`")]
struct ReportArgs {
    /// A profile file (it may belong to a running process).
    profile: PathBuf,
    #[arg(long, value_enum, default_value = "table")]
    format: Format,
    /// Same as --format json.
    #[arg(long)]
    json: bool,
    /// Arrange the table by function (per thread), by thread, or by lock (sync object).
    /// JSON output is the same for all three.
    #[arg(long, value_enum, default_value = "function")]
    by: By,
    /// Show at most N functions per thread (--by function only).
    #[arg(long)]
    top: Option<usize>,
    /// Only what happened after the newest `stint ctl <profile> snapshot`.
    #[arg(long)]
    since_snapshot: bool,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let r = match cli.command {
        Command::Rewrite(a) => rewrite(a),
        Command::Inspect(a) => inspect(a),
        Command::Report(a) => report(a),
        Command::Ctl(a) => commands::ctl::run(a),
        Command::Top(a) => commands::top::run(a),
        Command::Ls(a) => commands::ls::run(a),
    };
    match r {
        Ok(()) => ExitCode::SUCCESS,
        // A reader that went away (`stint report … | head`) is not an error.
        Err(e) if is_broken_pipe(&e) => ExitCode::SUCCESS,
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
fn one_line(e: &anyhow::Error) -> String {
    let parts: Vec<String> = e.chain().map(|c| c.to_string()).collect();
    parts.join(": ").replace('\n', " ")
}

fn load_spec(path: &Option<PathBuf>) -> anyhow::Result<stint_rewrite::spec::Spec> {
    match path {
        None => Ok(stint_rewrite::spec::Spec::default_spec()),
        Some(p) => {
            let text = std::fs::read_to_string(p).with_context(|| p.display().to_string())?;
            stint_rewrite::spec::Spec::parse(&text).map_err(|e| anyhow!("{}: {e}", p.display()))
        }
    }
}

fn read_input(path: &Path) -> anyhow::Result<Vec<u8>> {
    std::fs::read(path).with_context(|| path.display().to_string())
}

fn program_name(path: &Path) -> String {
    path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| "program".into())
}

fn rewrite(a: RewriteArgs) -> anyhow::Result<()> {
    let start = Instant::now();
    let spec = load_spec(&a.spec)?;
    let data = read_input(&a.input)?;
    let program = program_name(&a.input);
    let opts = stint_rewrite::Options { program: &program, spec: &spec, traps: a.traps };
    let (out, report) = stint_rewrite::rewrite(&data, &opts).map_err(|e| anyhow!("{}: {e}", a.input.display()))?;
    let mode = std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&a.input)?.permissions());
    write_atomically(&a.output, &out, (mode & 0o777) | 0o100)?;
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
            out.len() as f64 / 1024.0,
            start.elapsed().as_secs_f64()
        );
    }
    Ok(())
}

/// Write `bytes` to a temporary file beside `path` and rename it into place, so a failed
/// run never leaves a half-written output.
fn write_atomically(path: &Path, bytes: &[u8], mode: u32) -> anyhow::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let tmp = dir.join(format!(".{}.stint-tmp.{}", program_name(path), std::process::id()));
    let res = (|| -> std::io::Result<()> {
        let mut f = std::fs::OpenOptions::new().write(true).create_new(true).mode(mode).open(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if let Err(e) = res {
        let _ = std::fs::remove_file(&tmp);
        return Err(anyhow!("{}: cannot write: {e}", path.display()));
    }
    Ok(())
}

fn inspect(a: InspectArgs) -> anyhow::Result<()> {
    let spec = load_spec(&a.spec)?;
    let data = read_input(&a.input)?;
    let program = program_name(&a.input);
    let report =
        stint_rewrite::inspect(&data, &stint_rewrite::Options { program: &program, spec: &spec, traps: a.traps })
            .map_err(|e| anyhow!("{}: {e}", a.input.display()))?;
    let mut out = std::io::stdout().lock();
    if a.json {
        serde_json::to_writer_pretty(&mut out, &report)?;
        writeln!(out)?;
    } else {
        write!(out, "{}", report.to_text(a.skipped))?;
    }
    Ok(())
}

fn report(a: ReportArgs) -> anyhow::Result<()> {
    let p = if a.since_snapshot {
        stint_profile::profile::load_since_snapshot(&a.profile)
    } else {
        stint_profile::profile::load(&a.profile)
    }
    .map_err(|e| anyhow!("{}: {e}", a.profile.display()))?;
    let mut out = std::io::stdout().lock();
    let format = if a.json { Format::Json } else { a.format };
    match (format, a.by) {
        (Format::Json, _) => {
            serde_json::to_writer_pretty(&mut out, &stint_profile::json::profile_json(&p))?;
            writeln!(out)?;
        }
        (Format::Table, By::Function) => {
            let opts = stint_profile::report::TableOptions { top: a.top };
            write!(out, "{}", stint_profile::report::to_table_with(&p, &opts))?;
        }
        (Format::Table, By::Thread) => write!(out, "{}", stint_profile::report::to_thread_table(&p))?,
        (Format::Table, By::Lock) => write!(out, "{}", stint_profile::report::to_lock_table(&p))?,
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn cli_is_consistent() {
        use clap::CommandFactory;
        super::Cli::command().debug_assert();
    }

    #[test]
    fn report_by_and_json() {
        use super::{By, Cli, Command, Format};
        use clap::Parser;
        let parse = |args: &[&str]| match Cli::try_parse_from(args).map(|c| c.command) {
            Ok(Command::Report(a)) => Ok((a.by, a.format, a.json)),
            Ok(other) => panic!("not report: {other:?}"),
            Err(e) => Err(e.kind()),
        };
        assert!(matches!(parse(&["stint", "report", "p.stint"]), Ok((By::Function, Format::Table, false))));
        assert!(matches!(parse(&["stint", "report", "p.stint", "--by", "lock"]), Ok((By::Lock, _, false))));
        assert!(matches!(
            parse(&["stint", "report", "p.stint", "--by", "thread", "--json"]),
            Ok((By::Thread, _, true))
        ));
        assert_eq!(
            parse(&["stint", "report", "p.stint", "--by", "object"]).err(),
            Some(clap::error::ErrorKind::InvalidValue)
        );
    }
}
