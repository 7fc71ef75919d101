//! The CPU clock's context-switch detector (issue 14, rseqclk): where the perf page offers no
//! `cap_user_time`, the runtime arms the thread's rseq `rseq_cs` and the kernel clears it at
//! every switch and signal (rt-lib `clock.rs`). `testbins/rseqclk.c` runs, on a worker
//! thread, timed functions that wait 40 ms each (a futex wait, a nanosleep, a blocking pipe
//! read, a `pause()` ended by a signal whose handler spins) between two spins, and a forked
//! child's function that sleeps; it writes each call's own CLOCK_THREAD_CPUTIME_ID and wall
//! time to a side file. Three ways to run it: glibc as it comes (glibc's own rseq area),
//! glibc with `GLIBC_TUNABLES=glibc.pthread.rseq=0` and a `musl-gcc -static` build (no libc
//! area: the runtime registers its own).
//!
//! | test (per way) | checks |
//! | --- | --- |
//! | `<way>::same_behaviour` | stdout and exit status equal the original's |
//! | `<way>::clock_source` | every thread that ran a timed function says `rseq+tsc`, or `perf-task-clock+tsc` where this machine's perf page offers `cap_user_time` (the program reads it) |
//! | `<way>::a_futex_wait` … `a_pipe_read`, `a_signal` | the function's CPU time is within 1 ms + 10 % of its own clock, and under a third of its wall time (≥ 40 ms of it blocked) |
//! | `<way>::a_forked_child` | the same for the child's `in_child`, in the child's profile |
//!
//! The wrapper calibrations skipped where there are no wrappers (issue 14, (5)):
//! `no_wrappers::*` rewrites `testbins/nowrap.c` (one thread, no thread-library call): the
//! report says no wrapper-event figure, and `work`'s CPU time stays within 1 ms + 10 % of
//! its own clock.
//!
//! A program's own critical sections (`own_critical_sections::*`): `testbins/rseqcs.c`
//! increments per-CPU counters in rseq sections on glibc's area from two threads, in a timed
//! `bump` that also sleeps: the total stays exact (400,000) and `bump`'s CPU time its own.
//!
//! A spec without `cpu_time` (`wall_only::*`, `CFG_NO_CPU_CLOCK`): `testbins/rseqclk.c`
//! rewritten with `calls` + `wall_time`, the original and the rewritten program each run under
//! `strace -f -e trace=clock_gettime` (every system call then a switch): the rewritten one
//! makes exactly as many `clock_gettime(CLOCK_THREAD_CPUTIME_ID)` as the original's own
//! `timing.h` reads (none of the runtime's), its threads' clock is `wall-only` with no
//! re-synchronisation, and each blocking function's wall time is its own within 1 ms + 10 %;
//! with `sampling: true` added the worker keeps its detector (the decision reads the CPU clock).
//! strace missing skips them loudly, and fails them under CI.
//!
//! musl-gcc (musl-tools) missing skips the musl tests loudly, and fails them under CI.
use crate::common::*;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Way {
    Glibc,
    GlibcRseqOff,
    Musl,
}

impl Way {
    fn name(self) -> &'static str {
        match self {
            Way::Glibc => "glibc",
            Way::GlibcRseqOff => "glibc-rseq-off",
            Way::Musl => "musl-static",
        }
    }
}

/// One run of the original and one of the rewritten program.
struct Runs {
    want: Outcome,
    got: Outcome,
    parent: Value,
    child: Value,
    /// The rewritten run's side files: the parent's and the child's.
    times: PathBuf,
    child_times: PathBuf,
    /// What the original's side file said of this machine's perf page.
    cap_user_time: i64,
}

fn original(way: Way) -> Option<PathBuf> {
    if way != Way::Musl {
        return Some(build(&program("rseqclk"), Variant::PieO2));
    }
    if std::process::Command::new("musl-gcc").arg("--version").output().is_err() {
        if under_ci() {
            panic!("musl-gcc: missing under CI; .ci/run must `apt-get install musl-tools`");
        }
        eprintln!("\n!!!!!!!!!! SKIPPED: musl-gcc is not installed (apt-get install musl-tools); this test checks nothing here !!!!!!!!!!\n");
        return None;
    }
    let dir = fresh_dir("rseqclk-musl-build");
    let out = dir.join("rseqclk");
    let src = testbins_dir().join("rseqclk.c");
    tool("musl-gcc", &["-Wall", "-Werror", "-O2", "-static", "-pthread", "-o", path_str(&out), path_str(&src)]);
    Some(out)
}

fn runs(way: Way) -> Option<&'static Runs> {
    static CELLS: [OnceLock<Option<Runs>>; 3] = [OnceLock::new(), OnceLock::new(), OnceLock::new()];
    CELLS[way as usize]
        .get_or_init(|| {
            let bin = original(way)?;
            let dir = fresh_dir(&format!("rseqclk-{}", way.name()));
            let rewritten = dir.join("rseqclk");
            rewrite(&bin, &rewritten);
            let _share = cpu_share();
            fn run<'a>(way: Way, program: &'a Path, dir: &'a Path, times: &Path) -> Run<'a> {
                let r = Run::new(program, dir).env("TIMES_FILE", path_str(times)).timeout(Duration::from_secs(60));
                match way {
                    Way::GlibcRseqOff => r.env("GLIBC_TUNABLES", "glibc.pthread.rseq=0"),
                    _ => r,
                }
            }
            let orig_times = dir.join("orig.times");
            let want = run(way, &bin, &dir, &orig_times).run();
            let profiles = fresh_dir(&format!("rseqclk-profiles-{}", way.name()));
            let times = dir.join("got.times");
            let got =
                run(way, &rewritten, &dir, &times).env("STINT_PROFILE", &profile_template(&profiles, "rseqclk")).run();
            let files = dir_entries(&profiles);
            assert_eq!(files.len(), 2, "{}: profiles {files:?}, want the parent's and the child's", way.name());
            let reports: Vec<Value> = files.iter().map(|f| report_json(&profiles.join(f))).collect();
            let (child, parent): (Vec<Value>, Vec<Value>) =
                reports.into_iter().partition(|r| r["fork_child"].as_bool() == Some(true));
            assert!(parent.len() == 1 && child.len() == 1, "{}: want one parent and one fork child", way.name());
            let text = std::fs::read_to_string(&orig_times).unwrap_or_default();
            let cap_user_time = text
                .lines()
                .find_map(|l| l.strip_prefix("cap_user_time "))
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or_else(|| panic!("{}: no cap_user_time line in {text:?}", way.name()));
            let child_times = dir.join("got.times.child");
            Some(Runs {
                want,
                got,
                parent: parent.into_iter().next().unwrap(),
                child: child.into_iter().next().unwrap(),
                times,
                child_times,
                cap_user_time,
            })
        })
        .as_ref()
}

fn same_behaviour(way: Way) {
    let Some(r) = runs(way) else { return };
    assert!(r.want.status == 0 && r.want.stdout_str() == "done: child 0\n", "{}: original: {:?}", way.name(), r.want);
    assert!(
        r.want.same_behaviour(&r.got),
        "{}: {}",
        way.name(),
        describe_difference("original", &r.want, "rewritten", &r.got)
    );
}

/// The thread of a report that called `function`.
fn thread_of<'v>(r: &'v Value, function: &str) -> &'v Value {
    threads(r).iter().find(|t| thread_calls(t, function) > 0).unwrap_or_else(|| panic!("no thread called {function}"))
}

fn clock_source(way: Way) {
    let Some(r) = runs(way) else { return };
    let want = if r.cap_user_time == 1 { "perf-task-clock+tsc" } else { "rseq+tsc" };
    for (what, doc, f) in [("worker", &r.parent, "in_futex"), ("fork child", &r.child, "in_child")] {
        let t = thread_of(doc, f);
        assert_eq!(
            t["clock_source"],
            want,
            "{}: the {what}'s CPU clock (this machine's perf page: cap_user_time {})",
            way.name(),
            r.cap_user_time
        );
    }
}

/// `function`'s CPU time in the report is its own clock's (within 1 ms + 10 %), and far
/// below its wall time: the 40 ms it waited were seen as a switch.
fn own_cpu_time(way: Way, function: &str) {
    let Some(r) = runs(way) else { return };
    let (doc, times) = if function == "in_child" { (&r.child, &r.child_times) } else { (&r.parent, &r.times) };
    let own = side_cpu_ns(times, function) / 1e6;
    let row = function_row(thread_of(doc, function), function).expect("a row");
    let cpu = row["cpu_ns"].as_f64().expect("cpu_ns") / 1e6;
    let wall = row["wall_ns"].as_f64().expect("wall_ns") / 1e6;
    let ctx =
        format!("{}: {function}: report {cpu:.3} ms CPU, {wall:.3} ms wall; its own clock {own:.3} ms", way.name());
    assert!(wall >= 40.0, "{ctx}: it waited 40 ms");
    assert!((cpu - own).abs() <= 1.0 + 0.1 * own, "{ctx}: the CPU time is not the thread's");
    assert!(cpu < wall / 3.0, "{ctx}: blocked time counted as CPU time");
}

macro_rules! way_tests {
    ($($m:ident => $way:expr;)*) => {$(
        mod $m {
            use super::*;
            #[test]
            fn same_behaviour() {
                super::same_behaviour($way);
            }
            #[test]
            fn clock_source() {
                super::clock_source($way);
            }
            #[test]
            fn a_futex_wait() {
                own_cpu_time($way, "in_futex");
            }
            #[test]
            fn a_sleep() {
                own_cpu_time($way, "in_sleep");
            }
            #[test]
            fn a_pipe_read() {
                own_cpu_time($way, "in_pipe");
            }
            #[test]
            fn a_signal() {
                own_cpu_time($way, "in_signal");
            }
            #[test]
            fn a_forked_child() {
                own_cpu_time($way, "in_child");
            }
        }
    )*};
}

way_tests! {
    glibc => Way::Glibc;
    glibc_rseq_off => Way::GlibcRseqOff;
    musl_static => Way::Musl;
}

/// `testbins/nowrap.c` rewritten and run once: its report and its own clock's figure.
struct NoWrap {
    want: Outcome,
    got: Outcome,
    doc: Value,
    table: String,
    own_ms: f64,
}

fn no_wrap() -> &'static NoWrap {
    static CELL: OnceLock<NoWrap> = OnceLock::new();
    CELL.get_or_init(|| {
        let bin = build(&program("nowrap"), Variant::PieO2);
        let dir = fresh_dir("rseqclk-nowrap");
        let rewritten = dir.join("nowrap");
        rewrite(&bin, &rewritten);
        let _share = cpu_share();
        let want = Run::new(&bin, &dir).run();
        let (times, prof) = (dir.join("got.times"), dir.join("nowrap.stint"));
        let got =
            Run::new(&rewritten, &dir).env("TIMES_FILE", path_str(&times)).env("STINT_PROFILE", path_str(&prof)).run();
        let doc = report_json(&prof);
        let t = stint(&["report", path_str(&prof)]);
        assert_eq!(t.status, 0, "{}", t.stderr_str());
        NoWrap { want, got, doc, table: t.stdout_str(), own_ms: side_cpu_ns(&times, "work") / 1e6 }
    })
}

mod no_wrappers {
    use super::*;

    #[test]
    fn same_behaviour() {
        let r = no_wrap();
        assert!(r.want.status == 0 && r.want.stdout_str() == "worked 3 times\n", "original: {:?}", r.want);
        assert!(r.want.same_behaviour(&r.got), "{}", describe_difference("original", &r.want, "rewritten", &r.got));
    }

    #[test]
    fn no_wrapper_figure_is_calibrated_or_reported() {
        let r = no_wrap();
        let c = &r.doc["compensation"];
        assert_eq!(c["applied"], true, "the timed call was calibrated: {c}");
        for key in ["wrapper_event_ps", "wrapper_slow_event_ps"] {
            assert!(c.get(key).is_none(), "{key} measured in a program without wrappers: {c}");
        }
        assert!(!r.table.contains("wrapper event"), "the table names wrapper events:\n{}", r.table);
    }

    #[test]
    fn work_stays_exact() {
        let r = no_wrap();
        let main = main_thread(&r.doc);
        assert_eq!(thread_calls(main, "work"), 3, "work's calls");
        let cpu = main_cpu_ns(&r.doc, "work") / 1e6;
        let own = r.own_ms;
        assert!((cpu - own).abs() <= 1.0 + 0.1 * own, "work: report {cpu:.3} ms CPU, its own clock {own:.3} ms");
    }
}

/// `testbins/rseqcs.c` (per-CPU counters in rseq critical sections of its own, on glibc's
/// area) rewritten and run once: outcomes, report, side file.
struct OwnSections {
    want: Outcome,
    got: Outcome,
    doc: Value,
    times: PathBuf,
}

fn own_sections() -> &'static OwnSections {
    static CELL: OnceLock<OwnSections> = OnceLock::new();
    CELL.get_or_init(|| {
        let bin = build(&program("rseqcs"), Variant::PieO2);
        let dir = fresh_dir("rseqclk-rseqcs");
        let rewritten = dir.join("rseqcs");
        rewrite(&bin, &rewritten);
        let _share = cpu_share();
        let want = Run::new(&bin, &dir).run();
        let (times, prof) = (dir.join("got.times"), dir.join("rseqcs.stint"));
        let got =
            Run::new(&rewritten, &dir).env("TIMES_FILE", path_str(&times)).env("STINT_PROFILE", path_str(&prof)).run();
        OwnSections { want, got, doc: report_json(&prof), times }
    })
}

mod own_critical_sections {
    use super::*;

    #[test]
    fn keep_their_exact_counts() {
        let r = own_sections();
        assert!(r.want.status == 0 && r.want.stdout_str() == "total 400000 of 400000\n", "original: {:?}", r.want);
        assert!(r.want.same_behaviour(&r.got), "{}", describe_difference("original", &r.want, "rewritten", &r.got));
    }

    #[test]
    fn and_the_clock_stays_the_thread_s() {
        let r = own_sections();
        let text = std::fs::read_to_string(&r.times).expect("side file");
        let mut seen = 0;
        for line in text.lines() {
            let w: Vec<&str> = line.split_whitespace().collect();
            let (tid, own) = (w[1].parse::<u64>().unwrap(), w[2].parse::<f64>().unwrap() / 1e6);
            let t = threads(&r.doc).iter().find(|t| t["tid"].as_u64() == Some(tid)).expect("the worker's thread");
            let cpu = function_row(t, "bump").expect("bump")["cpu_ns"].as_f64().expect("timed") / 1e6;
            assert!(
                (cpu - own).abs() <= 1.0 + 0.1 * own,
                "bump on {tid}: report {cpu:.3} ms CPU, its own clock {own:.3}"
            );
            seen += 1;
        }
        assert_eq!(seen, 2, "two workers in {text:?}");
    }
}

/// `testbins/rseqclk.c` rewritten with a spec that measures no CPU time (`calls` and
/// `wall_time`), the original and the rewritten run each under `strace -f -e
/// trace=clock_gettime`: outcomes, the rewritten run's report and side file, and how many
/// `clock_gettime(CLOCK_THREAD_CPUTIME_ID)` each made (the program's own `timing.h` reads
/// are the same in both). `None`: strace is missing or cannot trace here (skipped loudly;
/// a failure under CI).
struct WallOnly {
    want: Outcome,
    got: Outcome,
    doc: Value,
    child: Value,
    times: PathBuf,
    child_times: PathBuf,
    cpu_clock_calls: (usize, usize),
}

const WALL_ONLY_SPEC: &str = "metrics:\n  - {name: calls, kind: counter, at: entry, on_at_start: true}\n  \
    - {name: wall_time, kind: timer, at: function, on_at_start: true}\n";

fn wall_only() -> Option<&'static WallOnly> {
    static CELL: OnceLock<Option<WallOnly>> = OnceLock::new();
    CELL.get_or_init(|| {
        let skip = |why: &str| {
            if under_ci() {
                panic!("strace: {why} under CI; .ci/run must `apt-get install strace`");
            }
            eprintln!("\n!!!!!!!!!! SKIPPED: strace {why}; this test checks nothing here !!!!!!!!!!\n");
            None
        };
        if std::process::Command::new("strace").arg("-V").output().is_err() {
            return skip("is not installed");
        }
        let bin = build(&program("rseqclk"), Variant::PieO2);
        let dir = fresh_dir("rseqclk-wall-only");
        let (spec, rewritten) = (dir.join("wall.yaml"), dir.join("rseqclk"));
        std::fs::write(&spec, WALL_ONLY_SPEC).expect("spec");
        let o = stint(&["rewrite", path_str(&bin), "-o", path_str(&rewritten), "--spec", path_str(&spec), "-q"]);
        assert_eq!(o.status, 0, "rewrite: {}", o.stderr_str());
        let _share = cpu_share();
        let traced = |program: &Path, trace: &Path, times: &Path, profile: Option<&str>| {
            let strace = PathBuf::from("strace");
            let args = ["-f", "-qq", "-e", "trace=clock_gettime", "-o", path_str(trace), path_str(program)];
            let r = Run::new(&strace, &dir).args(args).env("TIMES_FILE", path_str(times));
            let r = match profile {
                Some(p) => r.env("STINT_PROFILE", p),
                None => r,
            };
            let out = r.timeout(Duration::from_secs(120)).run();
            let text = std::fs::read_to_string(trace).unwrap_or_default();
            (out, text.lines().filter(|l| l.contains("clock_gettime(CLOCK_THREAD_CPUTIME_ID")).count())
        };
        let (want, orig_calls) = traced(&bin, &dir.join("orig.strace"), &dir.join("orig.times"), None);
        if want.status != 0 && want.stderr_str().contains("ptrace") {
            return skip(&format!("cannot trace here: {}", want.stderr_str().trim()));
        }
        let profiles = fresh_dir("rseqclk-wall-only-profiles");
        let times = dir.join("got.times");
        let template = profile_template(&profiles, "rseqclk");
        let (got, got_calls) = traced(&rewritten, &dir.join("got.strace"), &times, Some(&template));
        let reports: Vec<Value> = dir_entries(&profiles).iter().map(|f| report_json(&profiles.join(f))).collect();
        let (child, parent): (Vec<Value>, Vec<Value>) =
            reports.into_iter().partition(|r| r["fork_child"].as_bool() == Some(true));
        assert!(parent.len() == 1 && child.len() == 1, "want one parent and one fork child profile");
        Some(WallOnly {
            want,
            got,
            doc: parent.into_iter().next().unwrap(),
            child: child.into_iter().next().unwrap(),
            child_times: dir.join("got.times.child"),
            times,
            cpu_clock_calls: (orig_calls, got_calls),
        })
    })
    .as_ref()
}

/// A spec without `cpu_time` (and without sampling): no switch detector, no CPU clock.
mod wall_only {
    use super::*;

    #[test]
    fn same_behaviour() {
        let Some(r) = wall_only() else { return };
        assert!(r.want.status == 0 && r.want.stdout_str() == "done: child 0\n", "original: {:?}", r.want);
        assert!(
            r.want.stdout == r.got.stdout && r.want.status == r.got.status,
            "{}",
            describe_difference("original", &r.want, "rewritten", &r.got)
        );
    }

    #[test]
    fn makes_no_cpu_clock_system_call() {
        let Some(r) = wall_only() else { return };
        let (orig, got) = r.cpu_clock_calls;
        assert!(orig > 0, "the original's own CLOCK_THREAD_CPUTIME_ID reads were not seen: strace output?");
        assert_eq!(
            got, orig,
            "clock_gettime(CLOCK_THREAD_CPUTIME_ID) calls of the rewritten program under strace (every system call \
             a switch), against the original's own"
        );
    }

    #[test]
    fn clock_source_says_wall_only() {
        let Some(r) = wall_only() else { return };
        for (what, doc, f) in [("worker", &r.doc, "in_futex"), ("fork child", &r.child, "in_child")] {
            let t = thread_of(doc, f);
            assert_eq!(t["clock_source"], "wall-only", "the {what}'s clock: {t}");
            assert_eq!(t["resyncs"], 0, "the {what} re-synchronised a CPU clock: {t}");
        }
    }

    /// The sampling decision reads the CPU clock (calls off a CPU stay timed): a spec that
    /// may sample keeps the detector, with no `cpu_time` either.
    #[test]
    fn a_sampling_spec_keeps_the_detector() {
        let bin = build(&program("rseqclk"), Variant::PieO2);
        let dir = fresh_dir("rseqclk-wall-sampled");
        let (spec, rewritten, prof) = (dir.join("wall.yaml"), dir.join("rseqclk"), dir.join("p.%p.stint"));
        std::fs::write(&spec, format!("sampling: true\n{WALL_ONLY_SPEC}")).expect("spec");
        let o = stint(&["rewrite", path_str(&bin), "-o", path_str(&rewritten), "--spec", path_str(&spec), "-q"]);
        assert_eq!(o.status, 0, "rewrite: {}", o.stderr_str());
        let got = Run::new(&rewritten, &dir)
            .env("STINT_PROFILE", path_str(&prof))
            .env("TIMES_FILE", path_str(&dir.join("got.times")))
            .timeout(Duration::from_secs(60))
            .run();
        assert_eq!((got.status, got.stdout_str().as_str()), (0, "done: child 0\n"), "{got:?}");
        let parent = dir_entries(&dir)
            .into_iter()
            .filter(|f| f.ends_with(".stint"))
            .map(|f| report_json(&dir.join(f)))
            .find(|r| r["fork_child"].as_bool() != Some(true))
            .expect("the parent's profile");
        let t = thread_of(&parent, "in_futex");
        let source = t["clock_source"].as_str().unwrap_or_default();
        assert!(
            ["rseq+tsc", "perf-task-clock+tsc", "clock_gettime"].contains(&source),
            "a sampling spec's worker clock is {source:?}: {t}"
        );
    }

    #[test]
    fn wall_times_stay_exact() {
        let Some(r) = wall_only() else { return };
        for f in ["in_futex", "in_sleep", "in_pipe", "in_signal", "in_child"] {
            let (doc, times) = if f == "in_child" { (&r.child, &r.child_times) } else { (&r.doc, &r.times) };
            let text = std::fs::read_to_string(times).unwrap_or_else(|e| panic!("{}: {e}", times.display()));
            let own = text
                .lines()
                .find(|l| l.split_whitespace().next() == Some(f))
                .and_then(|l| l.split_whitespace().nth(3))
                .and_then(|v| v.parse::<f64>().ok())
                .unwrap_or_else(|| panic!("{}: no wall time of {f}", times.display()))
                / 1e6;
            let row = function_row(thread_of(doc, f), f).expect("a row");
            assert_eq!(row["calls"], 1, "{f}: calls");
            let wall = row["wall_ns"].as_f64().expect("wall_ns") / 1e6;
            assert!(wall >= 40.0, "{f}: report {wall:.3} ms wall, it waited 40 ms");
            assert!((wall - own).abs() <= 1.0 + 0.1 * own, "{f}: report {wall:.3} ms wall, its own clock {own:.3} ms");
        }
    }
}
