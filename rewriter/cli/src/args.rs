//! Every argument of `stint`, in one place: the [`Cli`], its [`Command`]s, and one Args
//! struct per subcommand with EXAMPLES in its `--help` (clap derive). Values clap can check
//! (enums, numbers, durations) are turned into domain types here, at the boundary; the
//! command modules in `commands/` take these structs and nothing else from the command line.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, Subcommand, ValueEnum};

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
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    Rewrite(RewriteArgs),
    Inspect(InspectArgs),
    Report(ReportArgs),
    /// Control a running rewritten program: status, enable / disable metrics per function
    /// and thread, snapshot a baseline.
    Ctl(CtlArgs),
    /// Live view of a running program's profile: threads, states, top functions, lock waits.
    Top(TopArgs),
    /// List the live profiles of this user's processes.
    Ls(LsArgs),
    /// Compare two runs by function name; with --threshold, a CI gate (exit 1 on regression).
    Diff(DiffArgs),
    Run(RunArgs),
    Batch(BatchArgs),
    Merge(MergeArgs),
    /// Serve the live profiles over HTTP for Prometheus (OpenMetrics on /metrics).
    Serve(ServeArgs),
    /// Write profiles for Perfetto, Chrome, Firefox Profiler, pprof, flame graphs, OpenMetrics.
    Export(ExportArgs),
}

/// Write an instrumented copy of an executable.
#[derive(Parser, Debug)]
#[command(after_help = "EXAMPLES:\n  \
    stint rewrite ./server -o ./server.stint\n  \
    stint rewrite ./server -o ./server.stint --spec my-spec.yaml\n  \
    stint rewrite ./server -o ./server.stint --sampling\n\n\
    The output behaves like the input. When it runs it writes a profile file, named by\n\
    STINT_PROFILE (%p becomes the pid; default <program>.<pid>.stint in $STINT_DIR, else\n\
    $XDG_RUNTIME_DIR/stint, else /tmp/stint-<uid>; never the current directory); set STINT_PROFILE=\n\
    (empty) to run without measuring.")]
pub struct RewriteArgs {
    /// The executable to rewrite.
    pub input: PathBuf,
    /// Where to write the rewritten executable.
    #[arg(short, long)]
    pub output: PathBuf,
    /// Metric spec (YAML); the built-in default (specs/default.yaml) counts calls and times
    /// CPU and wall time of every function.
    #[arg(long)]
    pub spec: Option<PathBuf>,
    /// Also write the rewrite report (JSON) to this file.
    #[arg(long)]
    pub report: Option<PathBuf>,
    /// Print nothing on success (and no progress line).
    #[arg(short, long)]
    pub quiet: bool,
    /// Use int3 + SIGTRAP where no jump fits (exact but slow; the program's signal functions
    /// are then wrapped so that SIGTRAP stays usable, see "Safe traps" in the README;
    /// debuggers stop at every trap).
    #[arg(long)]
    pub traps: bool,
    /// Time one call in 64 of a function whose calls are short and frequent (after 512 timed
    /// calls on a thread, mean below 20 timed calls' cost) and estimate its time from them,
    /// with an error bound in the report; counts and call paths stay exact. The same as
    /// `sampling: true` in the spec. Off by default: every call is timed.
    #[arg(long)]
    pub sampling: bool,
}

/// Show what `rewrite` would instrument, and how.
#[derive(Parser, Debug)]
#[command(
    after_help = "EXAMPLES:\n  stint inspect /usr/bin/pigz\n  stint inspect /usr/bin/pigz --json | jq .summary\n  \
    stint inspect /usr/bin/pigz --json | jq '.points[] | select(.kind == \"import\")'   # calls into libraries"
)]
pub struct InspectArgs {
    pub input: PathBuf,
    /// Print the full report as JSON (functions, points with tactics, summary).
    #[arg(long)]
    pub json: bool,
    /// List every skipped entry, exit and call into an import with its reason.
    #[arg(long)]
    pub skipped: bool,
    #[arg(long)]
    pub spec: Option<PathBuf>,
    /// Use int3 + SIGTRAP where no jump fits (exact but slow; a thread that blocks SIGTRAP is
    /// killed when it hits one; debuggers stop at every trap).
    #[arg(long)]
    pub traps: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Format {
    Table,
    Json,
    /// One record per row of the table (RFC 4180), times in ns.
    Csv,
}

/// What `stint report` sorts functions by (most first; ties by calls, then name).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Sort {
    Calls,
    /// Inclusive CPU time.
    Cpu,
    /// Inclusive wall time.
    Wall,
    /// Self CPU time (inclusive minus the timed callees; needs call paths).
    #[value(name = "self")]
    SelfTime,
}

/// What the table of `stint report` is arranged by.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum By {
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
    stint report /tmp/pigz.1234.stint --since-snapshot  # only what came after `stint ctl ... snapshot`\n  \
    stint report --last pigz                         # the newest pigz profile in the profile directory\n  \
    stint report runs/a.stint runs/b.stint           # several runs summed (as `stint merge`)\n  \
    stint report runs/                               # every *.stint in runs/, summed\n  \
    stint report --tree runs/                        # the process tree of a run: fork, exec, children\n  \
    stint report --tree --sum runs/                  # the tree, then its profiles summed per program\n  \
    stint report /tmp/pigz.1234.stint --sort calls --top 10 --thread 'worker-*'\n  \
    stint report /tmp/pigz.1234.stint --format csv > pigz.csv  # tid,thread,function,address,calls,cpu_ns,wall_ns\n  \
    stint report /tmp/pigz.1234.stint --calltree --depth 4     # call paths top down, per thread\n  \
    stint report /tmp/pigz.1234.stint --callers deflate        # who calls deflate, how often, how long\n  \
    stint report /tmp/pigz.1234.stint --callees compress_thread\n  \
    stint report /tmp/pigz.1234.stint --sort self --top 10     # where the time goes itself\n  \
    stint report /tmp/pigz.1234.stint --raw           # times as measured, instrumentation cost included\n  \
    stint report /tmp/pigz.1234.stint --symbols ./pigz.debug  # names from this debug file\n\n\
    Names of a stripped program (sub_<hex>, lock addresses) come from its debug info, looked\n\
    up by build-id in /usr/lib/debug/.build-id (or the :-separated $STINT_DEBUG_ROOT), by\n\
    .gnu_debuglink next to the program, and from $DEBUGINFOD_URLS (unless --no-debuginfod).\n\n\
    In the tables, `off` marks a time whose metric was off, `open` a timed function none of\n\
    whose calls returned yet, `-` a function measured by calls only (see `stint inspect\n\
    --skipped`); a footer explains each mark used.\n\n\
    A rewritten program run without STINT_PROFILE puts its profile in $STINT_DIR, else\n\
    $XDG_RUNTIME_DIR/stint, else /tmp/stint-<uid> (private to you), as <program>.<pid>.stint.")]
pub struct ReportArgs {
    /// A profile file (it may belong to a running process); or several profile files,
    /// stint-profile/1 JSON (`stint merge` output) or directories (every
    /// *.stint in them); several are summed per program as `stint merge` does.
    #[arg(required_unless_present = "last", conflicts_with = "last")]
    pub profile: Vec<PathBuf>,
    /// Instead of a file: the newest profile in the profile directory ($STINT_DIR, else
    /// $XDG_RUNTIME_DIR/stint, else /tmp/stint-<uid>), of PROGRAM if given.
    #[arg(long, value_name = "PROGRAM", num_args = 0..=1, default_missing_value = "")]
    pub last: Option<String>,
    #[arg(long, value_enum, default_value = "table")]
    pub format: Format,
    /// Same as --format json.
    #[arg(long)]
    pub json: bool,
    /// Arrange the table by function (per thread), by thread, or by lock (sync object).
    /// JSON output is the same for all three.
    #[arg(long, value_enum, default_value = "function")]
    pub by: By,
    /// Show the N most expensive functions per thread (in --sort order) and how many were
    /// cut; 0 shows all (--by function: the table and CSV).
    #[arg(long, value_name = "N")]
    pub top: Option<usize>,
    /// Sort functions by calls, cpu or wall time (inclusive), most first; ties by calls, then
    /// name. Default: cpu (calls for a profile without timers).
    #[arg(long, value_enum, value_name = "KEY")]
    pub sort: Option<Sort>,
    /// Only these threads: a kernel tid, or a glob (`*`, `?`) on the thread's name or its
    /// start routine (--by function, and every --format csv).
    #[arg(long, value_name = "TID|NAME-GLOB")]
    pub thread: Option<String>,
    /// Shorten long function names (with `…` in the middle) so table lines fit in N
    /// columns. Default: the terminal's width if stdout is one, else no limit.
    #[arg(long, value_name = "N")]
    pub width: Option<usize>,
    /// Only what happened after the newest `stint ctl <profile> snapshot`.
    #[arg(long)]
    pub since_snapshot: bool,
    /// Times as measured: without subtracting what the instrumentation itself costs (by
    /// default every inclusive and self time loses the calibrated cost of the timed calls
    /// nested in it, and of the uncontended mutex locks and unlocks through the wrappers,
    /// and the report says "compensated"). Never subtracted: counted-only calls and the
    /// wrappers' other paths nested in a timed function (nothing says which caller made
    /// them), and without call paths a callee's cost in its caller.
    #[arg(long)]
    pub raw: bool,
    /// The calling-context tree of each thread, top down: calls, inclusive and self times,
    /// % of the thread's time per call path (siblings in --sort order).
    #[arg(long, conflicts_with_all = ["callers", "callees"])]
    pub calltree: bool,
    /// With --calltree: show call paths at most N functions deep (deeper ones fold into
    /// their callers' inclusive times).
    #[arg(long, value_name = "N", requires = "calltree")]
    pub depth: Option<usize>,
    /// The callers of function F (gprof style): per caller, the calls and inclusive times
    /// of F from it, per thread.
    #[arg(long, value_name = "F", conflicts_with = "callees")]
    pub callers: Option<String>,
    /// The callees of function F: per callee, the calls and inclusive times from F to it.
    #[arg(long, value_name = "F")]
    pub callees: Option<String>,
    /// Show the profiles (files or directories) as the tree of processes they came from
    /// (forks, execs, spawned children), with each image's calls, CPU and wall time and how
    /// it ended. --format json prints the stint-proctree/1 document.
    #[arg(long, conflicts_with_all = ["last", "since_snapshot"])]
    pub tree: bool,
    /// With --tree: also sum the tree's profiles per program (as `stint merge`).
    #[arg(long, requires = "tree")]
    pub sum: bool,
    #[command(flatten)]
    pub names: SymbolArgs,
}

/// Where names come from when a profile is read (issue 11): the program's separate debug
/// info, found by build-id, debuglink or debuginfod, or the file given.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct SymbolArgs {
    /// Take function and data symbols from FILE (a `.debug` file or an unstripped build of
    /// the program) instead of looking for its debug info.
    #[arg(long, value_name = "FILE")]
    pub symbols: Option<PathBuf>,
    /// Do not ask the debuginfod servers of $DEBUGINFOD_URLS for debug info.
    #[arg(long)]
    pub no_debuginfod: bool,
}

impl SymbolArgs {
    /// The name resolver these flags and the environment ask for.
    pub fn resolver(&self) -> stint_profile::symbols::Resolver {
        use stint_profile::symbols::{Resolver, SymbolOptions};
        Resolver::new(SymbolOptions::from_env(self.symbols.clone(), !self.no_debuginfod))
    }
}

/// Arguments of `stint ctl`.
#[derive(clap::Args, Debug)]
#[command(after_help = "EXAMPLES:\n  \
    stint ctl /tmp/server.4242.stint status\n  \
    stint ctl /tmp/server.4242.stint enable cpu_time --function 'parse_*' --thread 4247\n  \
    stint ctl /tmp/server.4242.stint disable calls\n  \
    stint ctl /tmp/server.4242.stint enable all\n  \
    stint ctl /tmp/server.4242.stint snapshot      # then: stint report ... --since-snapshot\n  \
    stint ctl /tmp/server.4242.stint sampling off  # time every call (rewritten with --sampling)\n\n\
    Metrics: calls, cpu_time, wall_time, lock_wait, lock_hold, state_trace, or all.\n\
    A metric is measured where both its function focus (--function) and its thread focus\n\
    (--thread) say so; changes reach the program at its next event.")]
pub struct CtlArgs {
    /// The profile file of a running program (`stint ls` lists them).
    pub profile: PathBuf,
    #[command(subcommand)]
    pub action: CtlAction,
}

#[derive(clap::Subcommand, Debug)]
pub enum CtlAction {
    /// Show which metrics are on where, the threads and their clocks, snapshots, the
    /// control file.
    Status {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Turn metrics on (for the functions and threads given, else everywhere).
    Enable(FocusArgs),
    /// Turn metrics off (for the functions or the threads given, else everywhere).
    Disable(FocusArgs),
    /// Ask every thread to record a baseline at its next safe point; `stint report
    /// --since-snapshot` then shows only what happened after it.
    Snapshot {
        /// How long to wait for the threads to take it, in milliseconds.
        #[arg(long, default_value_t = 500)]
        wait_ms: u64,
    },
    /// In a program rewritten with --sampling: `off` times every call of every function from
    /// each thread's next call on; `on` times short, frequent functions one call in 64 again.
    Sampling {
        state: OnOff,
        /// How long to wait for the threads to apply it, in milliseconds.
        #[arg(long, default_value_t = 500)]
        wait_ms: u64,
    },
}

/// `on` or `off`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum OnOff {
    On,
    Off,
}

#[derive(clap::Args, Debug)]
pub struct FocusArgs {
    /// Metric names (or `all`).
    #[arg(required = true)]
    pub metrics: Vec<String>,
    /// Only functions whose name matches this glob (`*`, `?`); repeatable.
    #[arg(long = "function", short = 'f')]
    pub functions: Vec<String>,
    /// Only this thread (kernel tid, as `status` lists them); repeatable.
    #[arg(long = "thread", short = 't')]
    pub threads: Vec<u32>,
}

/// Arguments of `stint top`.
#[derive(clap::Args, Debug)]
#[command(after_help = "EXAMPLES:\n  \
    stint top /tmp/server.4242.stint\n  \
    stint top /tmp/server.4242.stint --interval 0.5 --thread 4250\n  \
    stint top /tmp/server.4242.stint --once                # one plain-text frame, rates over 1 s\n  \
    stint top /tmp/server.4242.stint --once --interval 0   # at once: totals, no rates\n  \
    stint top \"$(stint ls --json | jq -r '.[0].path')\"\n\n\
    KEYS:\n  \
    q, Esc   quit\n  \
    s        sort functions by calls, cpu or wall time in the interval\n  \
    t        show one thread's functions and lock waits (cycles through the threads, then all)\n  \
    1..6     switch metric calls, cpu_time, wall_time, lock_wait, lock_hold, state_trace\n           \
             on or off for every point and thread (as stint ctl does)\n  \
    p        pause / resume refreshing")]
pub struct TopArgs {
    /// A profile file (of a running program, or of one that ended).
    pub profile: PathBuf,
    /// Print one frame as plain text to stdout and exit (for scripts): two readings
    /// --interval apart.
    #[arg(long)]
    pub once: bool,
    /// Seconds between readings; rates are over the last interval. With --once, 0 takes a
    /// single reading (totals, no rates).
    #[arg(long, value_name = "SECS", default_value = "1", value_parser = parse_interval)]
    pub interval: Duration,
    /// Show only this thread's functions and lock waits (kernel tid).
    #[arg(long, value_name = "TID")]
    pub thread: Option<u32>,
}

/// `--interval`: seconds, 0 to a day.
fn parse_interval(s: &str) -> Result<Duration, String> {
    let secs: f64 = s.trim().parse().map_err(|_| format!("{s:?} is not a number of seconds"))?;
    if !(0.0..=86400.0).contains(&secs) {
        return Err(format!("{s}: want seconds from 0 to 86400"));
    }
    Ok(Duration::from_secs_f64(secs))
}

/// Arguments of `stint ls`.
#[derive(clap::Args, Debug)]
#[command(after_help = "EXAMPLES:\n  \
    stint ls                      # pid, program, uptime, threads and profile path of each\n  \
    stint ls --json | jq '.[].path'\n  \
    stint top $(stint ls --json | jq -r '.[0].path')\n\n\
    Profiles are found in /proc/<pid>/maps: a measuring process maps its profile file.")]
pub struct LsArgs {
    /// Also list profiles of other users' processes (where /proc lets us read their maps).
    #[arg(long)]
    pub all: bool,
    /// Print a JSON array of {pid, ppid, program, path, uptime_s, threads, alive, ...}.
    #[arg(long)]
    pub json: bool,
}

/// What `stint diff` compares.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum DiffMetric {
    /// Calls per function (deterministic: `--threshold 0` is an exact gate).
    Calls,
    /// Inclusive CPU time per function.
    Cpu,
    /// Inclusive wall time per function.
    Wall,
    /// Self time per function (needs call paths).
    #[value(name = "self")]
    SelfTime,
    /// Time blocked per sync object (kind@function that first used it).
    #[value(name = "lock_wait", alias = "lock-wait")]
    LockWait,
    /// Time a mutex or rwlock was held, per sync object.
    Hold,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum DiffFormat {
    Table,
    Json,
    /// A GitHub-flavoured table for a pull-request comment.
    Markdown,
}

/// Compare two runs: base and new side by side, matched by function name.
#[derive(clap::Args, Debug)]
#[command(after_help = "EXAMPLES:\n  \
    stint diff base.stint new.stint                       # CPU time per function, side by side\n  \
    stint diff base.json new.json --threshold 5%          # exit 1 if a function got >5% slower\n  \
    stint diff base.json new.json --threshold 10% --min-abs 2   # ... and by at least 2 ms\n  \
    stint diff base.json new.json --metric calls --threshold 0  # exact gate on call counts\n  \
    stint diff base.json new.json --metric calls --threshold 0 --format markdown > comment.md\n  \
    stint diff base.stint new.stint --metric lock_wait --by-thread\n  \
    stint diff base.stint new.stint --symbols ./server.debug  # names for a stripped server\n\n\
    BASE and NEW are profile files or stint-profile/1 JSON (stint report --format json,\n\
    stint merge -o), told apart by their content. Exit status: 0 within the thresholds (or\n\
    without --threshold), 1 on a regression, 2 on bad input.")]
pub struct DiffArgs {
    /// The run to compare against (profile file or stint-profile/1 JSON).
    pub base: PathBuf,
    /// The run to check.
    pub new: PathBuf,
    #[arg(long, value_enum, default_value = "cpu")]
    pub metric: DiffMetric,
    /// A row regresses when it grows by more than this, in percent of its base (`5%`, `0`
    /// for any growth). Without it, diff only prints and exits 0.
    #[arg(long, value_name = "PCT", value_parser = parse_percent)]
    pub threshold: Option<f64>,
    /// ...and by at least this much, in the metric's unit (calls, or ms for times), to
    /// ignore noise on small figures.
    #[arg(long, value_name = "N", requires = "threshold", value_parser = parse_min_abs)]
    pub min_abs: Option<f64>,
    /// One row per thread role (`main`, else the thread's own name, else its start routine)
    /// and function; threads of one role are summed.
    #[arg(long)]
    pub by_thread: bool,
    #[arg(long, value_enum, default_value = "table")]
    pub format: DiffFormat,
    #[command(flatten)]
    pub names: SymbolArgs,
}

/// `--threshold`: a percentage, `5%`, `2.5%` or `0` (the `%` is optional).
fn parse_percent(s: &str) -> Result<f64, String> {
    let t = s.trim();
    let n: f64 =
        t.strip_suffix('%').unwrap_or(t).trim().parse().map_err(|_| format!("{s:?} is not a percentage (5%, 0)"))?;
    if !n.is_finite() || n < 0.0 {
        return Err(format!("{s}: want a percentage of 0 or more"));
    }
    Ok(n)
}

/// `--min-abs`: a non-negative number.
fn parse_min_abs(s: &str) -> Result<f64, String> {
    let n: f64 = s.trim().parse().map_err(|_| format!("{s:?} is not a number"))?;
    if !n.is_finite() || n < 0.0 {
        return Err(format!("{s}: want a number of 0 or more"));
    }
    Ok(n)
}

/// Output format of `stint run`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum RunFormat {
    Table,
    Json,
    Csv,
}

/// Rewrite a program (cached), run it, and print its profile to stderr.
#[derive(clap::Args, Debug)]
#[command(after_help = "EXAMPLES:\n  \
    stint run -- ./prog args                          # report on stderr, prog's stdout untouched\n  \
    stint run --format json -o prof.json -- ./prog    # stint-profile/1 JSON into prof.json\n  \
    stint run --spec timing.yaml -- sort -n big.txt   # PROG is looked up in PATH\n  \
    stint run --keep -- ./server                      # keep the profiles (their directory is printed)\n\n\
    The rewritten program is cached in $XDG_CACHE_HOME/stint (else ~/.cache/stint), keyed by a\n\
    SHA-256 of the input, the spec and the stint version. It runs with the original argv[0],\n\
    stdin, stdout and stderr; SIGINT, SIGTERM, SIGHUP and SIGQUIT sent to stint run reach it.\n\
    stint run exits with the program's exit status, or dies by the signal that killed it.\n\
    Forked children write their own profiles; the report shows the main process first, then\n\
    each child under its own header. --format json prints one stint-profile/1 document for a\n\
    single process, a JSON array of documents (main process first) when there were children.\n\
    Errors of stint itself (not an executable, rewrite refused) exit 2 before the program runs.")]
pub struct RunArgs {
    /// Metric spec (YAML); the built-in default measures calls, CPU and wall time of every
    /// function.
    #[arg(long)]
    pub spec: Option<PathBuf>,
    /// Control file for the program (STINT_CONTROL).
    #[arg(long, value_name = "FILE")]
    pub control: Option<PathBuf>,
    #[arg(long, value_enum, default_value = "table")]
    pub format: RunFormat,
    /// Write the report to FILE instead of stderr.
    #[arg(short, long, value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Keep the profile files (their directory is printed on stderr).
    #[arg(long)]
    pub keep: bool,
    /// Say whether the cached rewrite was used, and where it is.
    #[arg(short, long)]
    pub verbose: bool,
    /// The program and its arguments (after `--`).
    #[arg(required = true, num_args = 1.., trailing_var_arg = true, allow_hyphen_values = true, value_name = "PROG ARGS")]
    pub command: Vec<std::ffi::OsString>,
}

/// Rewrite every ELF executable of a directory tree (a test suite) in parallel.
#[derive(clap::Args, Debug)]
#[command(after_help = "EXAMPLES:\n  \
    stint batch build/tests -o build/tests.stint      # mirror the tree, rewritten\n  \
    stint batch --in-place target/debug/deps          # originals kept as <name>.orig\n  \
    stint batch --restore target/debug/deps           # put the .orig files back\n  \
    stint batch ./a ./b -o out --jobs 2 --spec s.yaml\n\n\
    Directories are searched recursively for executable files. Symbolic links, scripts,\n\
    non-ELF files, shared libraries, Go programs and files already rewritten are\n\
    skipped, each with its reason. The summary (stdout) lists every file: rewritten with its\n\
    entry coverage, skipped, or failed. Exit status 1 if any rewrite failed, 2 on bad input.")]
pub struct BatchArgs {
    /// Directories (searched recursively) and files.
    #[arg(required = true)]
    pub inputs: Vec<PathBuf>,
    /// Write the rewritten files here, mirroring the layout below each input directory.
    #[arg(short, long, value_name = "OUTDIR", required_unless_present_any = ["in_place", "restore"], conflicts_with_all = ["in_place", "restore"])]
    pub output: Option<PathBuf>,
    /// Replace each executable by its rewritten copy; the original is kept as <name>.orig.
    #[arg(long, conflicts_with = "restore")]
    pub in_place: bool,
    /// Undo --in-place: move every <name>.orig back to <name>.
    #[arg(long)]
    pub restore: bool,
    /// Metric spec (YAML); the built-in default measures calls, CPU and wall time of every
    /// function.
    #[arg(long)]
    pub spec: Option<PathBuf>,
    /// Rewrites at once (default: the number of cores).
    #[arg(short, long, value_name = "N")]
    pub jobs: Option<std::num::NonZeroUsize>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn report_by_and_json() {
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

    #[test]
    fn diff_limits_parse() {
        assert_eq!(parse_percent("5%"), Ok(5.0));
        assert_eq!(parse_percent("0"), Ok(0.0));
        assert_eq!(parse_percent("2.5 %"), Ok(2.5));
        for bad in ["-1%", "x", "", "%", "inf", "NaN"] {
            assert!(parse_percent(bad).is_err(), "{bad:?}");
        }
        assert_eq!(parse_min_abs("0.5"), Ok(0.5));
        assert!(parse_min_abs("-2").is_err());
        let e = Cli::try_parse_from(["stint", "diff", "a", "b", "--min-abs", "3"]).unwrap_err();
        assert_eq!(e.kind(), clap::error::ErrorKind::MissingRequiredArgument);
        for (name, want) in
            [("lock_wait", DiffMetric::LockWait), ("self", DiffMetric::SelfTime), ("hold", DiffMetric::Hold)]
        {
            match Cli::try_parse_from(["stint", "diff", "a", "b", "--metric", name]).map(|c| c.command) {
                Ok(Command::Diff(a)) => assert_eq!(a.metric, want),
                other => panic!("{name}: {other:?}"),
            }
        }
    }

    #[test]
    fn run_takes_everything_after_the_program() {
        let cli = Cli::try_parse_from(["stint", "run", "--format", "json", "--", "prog", "-x", "--format", "y"]);
        let Ok(Cli { command: Command::Run(a) }) = cli else { panic!("{cli:?}") };
        assert_eq!(a.format, RunFormat::Json);
        assert_eq!(a.command, ["prog", "-x", "--format", "y"]);
    }

    #[test]
    fn batch_needs_a_destination() {
        let kind = |args: &[&str]| Cli::try_parse_from(args).err().map(|e| e.kind());
        assert_eq!(kind(&["stint", "batch", "d"]), Some(clap::error::ErrorKind::MissingRequiredArgument));
        assert_eq!(
            kind(&["stint", "batch", "d", "-o", "o", "--in-place"]),
            Some(clap::error::ErrorKind::ArgumentConflict)
        );
        assert_eq!(kind(&["stint", "batch", "d", "-o", "o"]), None);
        assert_eq!(kind(&["stint", "batch", "--restore", "d"]), None);
    }

    #[test]
    fn serve_and_export_arguments() {
        let Ok(Cli { command: Command::Serve(a) }) = Cli::try_parse_from(["stint", "serve"]) else { panic!() };
        assert_eq!((a.listen.to_string(), a.profiles, a.top), ("127.0.0.1:9464".into(), None, 10));
        let kind = |args: &[&str]| Cli::try_parse_from(args).err().map(|e| e.kind());
        assert_eq!(kind(&["stint", "serve", "--listen", "localhost"]), Some(clap::error::ErrorKind::ValueValidation));
        assert_eq!(kind(&["stint", "export", "p.stint"]), Some(clap::error::ErrorKind::MissingRequiredArgument));
        assert_eq!(kind(&["stint", "export", "p.stint", "--format", "openmetrics"]), None);
    }

    #[test]
    fn report_sort_values() {
        let sort = |v: &str| match Cli::try_parse_from(["stint", "report", "p.stint", "--sort", v]).map(|c| c.command) {
            Ok(Command::Report(a)) => Ok(a.sort),
            Ok(other) => panic!("not report: {other:?}"),
            Err(e) => Err(e.kind()),
        };
        assert_eq!(sort("calls"), Ok(Some(Sort::Calls)));
        assert_eq!(sort("cpu"), Ok(Some(Sort::Cpu)));
        assert_eq!(sort("wall"), Ok(Some(Sort::Wall)));
        assert_eq!(sort("self"), Ok(Some(Sort::SelfTime)));
        assert_eq!(sort("time"), Err(clap::error::ErrorKind::InvalidValue));
    }

    #[test]
    fn intervals_parse() {
        assert_eq!(parse_interval("1"), Ok(Duration::from_secs(1)));
        assert_eq!(parse_interval("0.3"), Ok(Duration::from_millis(300)));
        assert_eq!(parse_interval("0"), Ok(Duration::ZERO));
        for bad in ["-1", "x", "", "inf", "NaN", "1e9"] {
            assert!(parse_interval(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn every_subcommand_has_examples() {
        for sub in Cli::command().get_subcommands_mut() {
            let help = sub.render_long_help().to_string();
            assert!(help.contains("EXAMPLES:"), "{help}");
        }
        let top = Cli::command().find_subcommand_mut("top").unwrap().render_long_help().to_string();
        assert!(top.contains("--once"), "{top}");
    }
}

/// Sum many runs into one profile per program.
#[derive(Parser, Debug)]
#[command(after_help = "EXAMPLES:\n  \
    stint merge runs/*.stint -o suite.json          # a whole test suite, forked children too\n  \
    stint merge runs/ -o suite.json                 # every *.stint in runs/\n  \
    stint merge suite.json tonight/ -o all.json     # merged documents merge again\n  \
    stint merge a.stint b.stint -o -                # to stdout\n  \
    stint merge runs/ -o suite.json --no-debuginfod # names from local debug info only\n\n\
    The output is stint-profile/1 JSON (what `stint report --format json` prints) with\n\
    `runs` and `merged_from` added: threads summed by role (main, name, start routine; tid 0),\n\
    functions by name, sync objects by kind and first user. Several programs give a JSON\n\
    array, one document per program. `stint report FILE` reads both; `stint diff` reads one\n\
    document (merge one program at a time for it).")]
pub struct MergeArgs {
    /// Profile files, stint-profile/1 JSON documents, or directories (every *.stint in them).
    #[arg(required = true)]
    pub files: Vec<PathBuf>,
    /// Where to write the merged JSON (`-` for stdout).
    #[arg(short, long)]
    pub output: PathBuf,
    /// Print nothing on success.
    #[arg(short, long)]
    pub quiet: bool,
    #[command(flatten)]
    pub names: SymbolArgs,
}

/// Export profiles to the viewers people use: Perfetto, Chrome tracing, Firefox Profiler,
/// pprof, folded stacks, SVG flame graphs.
#[derive(Parser, Debug)]
#[command(after_help = "EXAMPLES:\n  \
    stint export prog.1234.stint --format pprof            # prog.1234.pb.gz\n  \
    go tool pprof -top -sample_index=cpu prog.1234.pb.gz\n  \
    stint export prog.1234.stint --format perfetto         # prog.1234.pftrace: ui.perfetto.dev\n  \
    stint export prog.1234.stint --format chrome -o t.json # chrome://tracing, Perfetto\n  \
    stint export prog.1234.stint --format firefox          # prog.1234.firefox.json: profiler.firefox.com\n  \
    stint export prog.1234.stint --format folded --weight calls -o -\n  \
    stint export prog.1234.stint --format svg --weight wall # prog.1234.svg\n  \
    stint export prog.1234.stint --format openmetrics -o /var/lib/node_exporter/textfile/app.prom\n\n\
    Call paths come from the threads' calling-context trees (one path per function when a\n\
    profile has none); values per path are exclusive: the leaf's calls and self time. pprof,\n\
    folded, svg and firefox carry the call paths; perfetto and chrome the timeline (state\n\
    slices, lock waits named by object, a blocked-threads counter); openmetrics the text\n\
    `stint serve` answers on /metrics. Without -o the output is written to the current\n\
    directory, named after the first profile (openmetrics: to stdout).")]
pub struct ExportArgs {
    /// Profile files (*.stint); several are exported together (one process each).
    #[arg(required = true)]
    pub profiles: Vec<PathBuf>,
    /// Output format.
    #[arg(long, short = 'f', value_enum)]
    pub format: ExportFormat,
    /// Where to write (`-` for stdout); default <first profile's name>.<format's extension>.
    #[arg(short, long)]
    pub output: Option<PathBuf>,
    /// What a path weighs in folded, svg and firefox: calls, or self cpu / wall time in ns
    /// (default: cpu when the profile measured time, else calls).
    #[arg(long, value_enum)]
    pub weight: Option<ExportWeight>,
    /// Print nothing on success.
    #[arg(short, long)]
    pub quiet: bool,
    /// openmetrics: functions (by CPU time) and lock objects (by wait time) per process.
    #[arg(long, value_name = "N", default_value_t = stint_profile::openmetrics::DEFAULT_TOP)]
    pub top: usize,
}

/// `stint export --format`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ExportFormat {
    /// Perfetto protobuf trace (.pftrace).
    Perfetto,
    /// Chrome trace-event JSON (.trace.json).
    Chrome,
    /// Firefox Profiler processed format (.firefox.json).
    Firefox,
    /// pprof profile.proto, gzipped (.pb.gz).
    Pprof,
    /// Folded stacks, `thread;a;b;c value` (.folded).
    Folded,
    /// SVG flame graph (.svg).
    Svg,
    /// OpenMetrics text, as `stint serve` answers on /metrics (node_exporter's textfile
    /// collector); to stdout without -o.
    Openmetrics,
}

/// `stint export --weight`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ExportWeight {
    Calls,
    Cpu,
    Wall,
}

/// Serve profiles over HTTP: OpenMetrics for Prometheus, the JSON of one process.
#[derive(clap::Args, Debug)]
#[command(after_help = "EXAMPLES:\n  \
    stint serve                                          # every live profile of this user, on 127.0.0.1:9464\n  \
    stint serve --listen 0.0.0.0:9464 --profiles '/var/lib/app/*.stint' --top 50\n  \
    curl -s 127.0.0.1:9464/metrics                       # OpenMetrics text\n  \
    curl -s 127.0.0.1:9464/profile/4242.json             # the stint-profile/1 JSON of pid 4242\n  \
    curl -s 127.0.0.1:9464/profile/4242.pprof > p.pb.gz  # its pprof profile: go tool pprof p.pb.gz\n\n\
    Endpoints (GET only): / (index), /metrics (OpenMetrics 1.0, or the Prometheus text format\n\
    0.0.4 when the Accept header asks for text/plain only), /profile/<pid>.json and .pprof. Each scrape\n\
    reads the files without stopping the programs. A process that ended is shown once more\n\
    with stint_process_ended 1, then no more. A file that is no profile is skipped with one\n\
    line on stderr and counted in stint_scrape_errors_total. SIGINT or SIGTERM stops it.")]
pub struct ServeArgs {
    /// Address and port to listen on.
    #[arg(long, default_value = "127.0.0.1:9464", value_name = "ADDR:PORT")]
    pub listen: std::net::SocketAddr,
    /// The profile files to serve: a glob (`*`, `?` in the file name) or a directory
    /// (default: the live profiles of this user's processes, as `stint ls` lists them).
    #[arg(long, value_name = "GLOB")]
    pub profiles: Option<String>,
    /// Functions (by CPU time) and lock objects (by wait time) per process.
    #[arg(long, value_name = "N", default_value_t = stint_profile::openmetrics::DEFAULT_TOP)]
    pub top: usize,
}
