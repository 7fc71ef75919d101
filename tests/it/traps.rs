//! Safe traps (issue 12): a program that blocks every signal in its threads, handles SIGTRAP
//! itself and ignores it, rewritten with `--traps`, runs exactly as the original, its trap
//! sites counted and timed. `testbins/sigblock.c` (see its header) has two assembly functions
//! whose entries and exits only a trap reaches; the signal wrappers (`rt-lib/src/signals.rs`)
//! keep SIGTRAP unblocked and stint's handler installed while the program reads back the
//! masks and actions it set.
//!
//! Built four ways, so that each path to a wrapper is taken: PLT calls (`plt`), calls
//! through the GOT (`noplt`, `-fno-plt`: call-site patches), and glibc `-static` and
//! `musl-gcc -static` (the signal functions' own entries, `WrapReal`). musl-gcc (musl-tools)
//! missing skips `static_musl` loudly, and fails it under CI.
//!
//! | test | checks |
//! | --- | --- |
//! | `<build>::same_output` | stdout (every old mask and action it reads back), stderr and exit status 3 of the rewritten program, measuring and off, equal the original's |
//! | `<build>::exact_counts` | main calls `trapped_a` 3 times and `trapped_b` once (in a SIGUSR1 handler whose mask is full), its SIGTRAP handler runs twice (its own `raise` and `int3`, never for a trap site); each worker calls `trapped_a` 300 times; `trapped_a` is timed on every thread |
//! | `<build>::trap_sites` | `inspect --traps`: both functions' entries and exits are traps, `trap_sites` counts them, the four signal functions the program calls are wrapped (through the GOT for `noplt`) |
//! | `no_trap_sites_no_wrappers` | without `--traps`, and with `--traps` for a program none of whose sites needs a trap: no trap sites and no signal wrapper |

use crate::common::*;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

const RUN_TIMEOUT: Duration = Duration::from_secs(60);

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Build {
    Plt,
    NoPlt,
    Static,
    Musl,
}

impl Build {
    fn name(self) -> &'static str {
        match self {
            Build::Plt => "plt",
            Build::NoPlt => "noplt",
            Build::Static => "static",
            Build::Musl => "musl-static",
        }
    }

    /// The compiler, and the package that has it.
    fn compiler(self) -> (&'static str, &'static str) {
        match self {
            Build::Musl => ("musl-gcc", "musl-tools"),
            _ => ("gcc", "gcc"),
        }
    }

    fn flags(self) -> &'static [&'static str] {
        match self {
            Build::Musl => &["-O2", "-static"],
            Build::Plt => &["-O2", "-fPIE", "-pie", "-pthread"],
            Build::NoPlt => &["-O2", "-fPIE", "-pie", "-pthread", "-fno-plt"],
            Build::Static => &["-O2", "-static", "-pthread"],
        }
    }
}

struct Case {
    label: String,
    original: Outcome,
    rewritten: Outcome,
    off: Outcome,
    report: Value,
    /// `stint inspect --traps --json` of the original.
    inspect: Value,
}

fn rewrite_with_traps(input: &Path, output: &Path) {
    std::fs::create_dir_all(output.parent().expect("a directory")).expect("output directory");
    let o = stint(&["rewrite", path_str(input), "-o", path_str(output), "--traps", "-q"]);
    assert!(o.status == 0 && o.stderr.is_empty(), "stint rewrite --traps {}: {o:?}", input.display());
}

fn inspect_traps(input: &Path) -> Value {
    let o = stint(&["inspect", path_str(input), "--traps", "--json"]);
    assert!(o.status == 0, "stint inspect --traps {}: {o:?}", input.display());
    serde_json::from_slice(&o.stdout).expect("inspect JSON")
}

fn run_case(b: Build) -> Option<Case> {
    let _share = cpu_share();
    let label = format!("traps-{}", b.name());
    let (cc, package) = b.compiler();
    if std::process::Command::new(cc).arg("--version").output().is_err() {
        assert!(!under_ci(), "{cc}: missing under CI; .ci/run must `apt-get install {package}`");
        eprintln!("\n!!!!!!!!!! SKIPPED: {cc} is not installed (apt-get install {package}); {label} checks nothing here !!!!!!!!!!\n");
        return None;
    }
    let dir = fresh_dir(&label);
    let bin = dir.join("sigblock");
    let src = testbins_dir().join("sigblock.c");
    let mut args = vec!["-Wall", "-Werror"];
    args.extend(b.flags());
    args.extend([path_str(&src), "-o", path_str(&bin)]);
    tool(cc, &args);
    let out: PathBuf = dir.join("out").join("sigblock");
    rewrite_with_traps(&bin, &out);
    let profiles = dir.join("profiles");
    std::fs::create_dir_all(&profiles).expect("profiles directory");
    let run =
        |p: &Path, profile: &str| Run::new(p, &dir).env(stint_layout::ENV_PROFILE, profile).timeout(RUN_TIMEOUT).run();
    let original = Run::new(&bin, &dir).timeout(RUN_TIMEOUT).run();
    let rewritten = run(&out, &profile_template(&profiles, "sigblock"));
    let off = run(&out, "");
    let file = profiles.join(format!("sigblock.{}.stint", rewritten.pid));
    assert!(file.is_file(), "{label}: no profile {}: {:?}", file.display(), dir_entries(&profiles));
    Some(Case { label, original, rewritten, off, report: report_json(&file), inspect: inspect_traps(&bin) })
}

/// The case of `b`; `None`: its compiler is missing (skipped).
fn case(b: Build) -> Arc<Option<Case>> {
    static CASES: RunCache<Build, Option<Case>> = OnceLock::new();
    cached_run(&CASES, b, &format!("traps {b:?}"), || run_case(b))
}

fn check_same_output(c: &Case) {
    assert_eq!(c.original.status, 3, "{}: the original exits 3: {:?}", c.label, c.original);
    assert!(c.original.stdout_str().contains("worker 2 sum 3000"), "{}: {:?}", c.label, c.original);
    for (what, o) in [("measuring", &c.rewritten), ("off", &c.off)] {
        assert!(
            c.original.same_behaviour(o),
            "{}: the rewritten program ({what}) behaves differently\n{}",
            c.label,
            describe_difference("original", &c.original, what, o)
        );
    }
}

use crate::common::{function_row as func, thread_calls as calls};

/// `name` was timed on thread `t`: CPU and wall time above 0 (CPU no more than wall, give or
/// take the two clocks' resolution).
fn assert_timed(label: &str, t: &Value, name: &str) {
    let f = func(t, name).unwrap_or_else(|| panic!("{label}: {name} not in thread {}", t["tid"]));
    let (cpu, wall) = (f["cpu_ns"].as_u64(), f["wall_ns"].as_u64());
    assert!(cpu.is_some_and(|c| c > 0), "{label}: {name} has no CPU time: {f}");
    let (cpu, wall) = (cpu.unwrap_or(0), wall.unwrap_or(0));
    assert!(cpu <= wall + wall / 100 + 1000, "{label}: {name}: CPU {cpu} ns > wall {wall} ns");
}

fn check_counts(c: &Case) {
    let main = main_thread(&c.report);
    let l = &c.label;
    assert_eq!(calls(main, "trapped_a"), 3, "{l}: main's trapped_a");
    assert_eq!(calls(main, "trapped_b"), 1, "{l}: trapped_b in the SIGUSR1 handler");
    assert_eq!(calls(main, "on_usr1"), 1, "{l}: on_usr1");
    // raise(SIGTRAP) and the program's own int3; none of the 2010 trapped_a iterations' traps.
    assert_eq!(calls(main, "on_trap"), 2, "{l}: the program's SIGTRAP handler");
    assert_timed(l, main, "trapped_a");
    assert_timed(l, main, "trapped_b");
    let workers: Vec<&Value> = threads(&c.report).iter().filter(|t| t["main"] != true).collect();
    assert_eq!(workers.len(), 2, "{l}: two workers");
    for w in workers {
        assert_eq!(calls(w, "worker"), 1, "{l}: worker");
        assert_eq!(calls(w, "trapped_a"), 300, "{l}: a worker's trapped_a (100 per mask state)");
        assert_timed(l, w, "trapped_a");
    }
}

fn check_trap_sites(c: &Case, b: Build) {
    let l = &c.label;
    let points = c.inspect["points"].as_array().expect("inspect lists points");
    for f in ["trapped_a", "trapped_b"] {
        for kind in ["entry", "exit"] {
            let tactics: Vec<&Value> =
                points.iter().filter(|p| p["function"] == f && p["kind"] == kind).map(|p| &p["tactic"]).collect();
            assert_eq!(tactics, ["trap"], "{l}: {f}'s {kind}");
        }
    }
    let s = &c.inspect["summary"];
    let traps = points.iter().filter(|p| p["tactic"] == "trap").count() as u64;
    assert_eq!(s["trap_sites"].as_u64(), Some(traps), "{l}: trap_sites counts the trap rows");
    if matches!(b, Build::Plt | Build::NoPlt) {
        // A dynamic program's other functions all fit a window.
        assert_eq!(traps, 4, "{l}: trap sites");
    }
    let wrapped: Vec<&str> = s["signal_wrappers"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
    for f in ["pthread_sigmask", "sigaction", "signal", "sigprocmask"] {
        assert!(wrapped.contains(&f), "{l}: {f} not among the signal wrappers {wrapped:?}");
        assert!(points.iter().any(|p| p["kind"] == "wrap" && p["function"] == f), "{l}: no wrap row for {f}");
    }
    if b == Build::NoPlt {
        let got = |f: &str| {
            points.iter().any(|p| {
                p["kind"] == "wrap" && p["function"] == f && p["tactic"].as_str().is_some_and(|t| t.starts_with("got-"))
            })
        };
        for f in ["pthread_sigmask", "sigaction", "signal", "sigprocmask"] {
            assert!(got(f), "{l}: {f}'s GOT call sites lead to its wrapper");
        }
    }
}

macro_rules! build_tests {
    ($($m:ident: $b:expr;)*) => {$(
        mod $m {
            use super::*;

            #[test]
            fn same_output() {
                if let Some(c) = case($b).as_ref() {
                    check_same_output(c);
                }
            }

            #[test]
            fn exact_counts() {
                if let Some(c) = case($b).as_ref() {
                    check_counts(c);
                }
            }

            #[test]
            fn trap_sites() {
                if let Some(c) = case($b).as_ref() {
                    check_trap_sites(c, $b);
                }
            }
        }
    )*};
}

build_tests! {
    plt: Build::Plt;
    noplt: Build::NoPlt;
    static_glibc: Build::Static;
    static_musl: Build::Musl;
}

/// A program that calls the signal functions but has no trap site.
const NO_TRAPS_C: &str = r#"
#include <signal.h>
#include <stdio.h>
int main(void) {
    sigset_t all;
    sigfillset(&all);
    sigprocmask(SIG_BLOCK, &all, NULL);
    signal(SIGTRAP, SIG_IGN);
    puts("blocked");
    return 0;
}
"#;

fn signal_wrap_rows(inspect: &Value) -> Vec<String> {
    let rows = inspect["points"].as_array().expect("inspect lists points");
    rows.iter()
        .filter(|p| p["kind"] == "wrap")
        .filter_map(|p| p["function"].as_str())
        .filter(|f| stint_layout::SignalFn::from_name(f).is_some())
        .map(str::to_string)
        .collect()
}

#[test]
fn no_trap_sites_no_wrappers() {
    let _share = cpu_share();
    let dir = fresh_dir("traps-none");
    // sigblock without --traps: its trap-only functions are skipped, nothing is wrapped.
    let bin = dir.join("sigblock");
    let src = testbins_dir().join("sigblock.c");
    tool("gcc", &["-O2", "-fPIE", "-pie", "-pthread", path_str(&src), "-o", path_str(&bin)]);
    let plain = inspect_json(&bin);
    assert_eq!(plain["summary"].get("trap_sites"), None, "no --traps: no trap sites");
    assert_eq!(plain["summary"].get("signal_wrappers"), None);
    assert_eq!(signal_wrap_rows(&plain), Vec::<String>::new());
    // A program whose every site fits a window, with --traps.
    let src = dir.join("quiet.c");
    std::fs::write(&src, NO_TRAPS_C).expect("source");
    let bin = dir.join("quiet");
    tool("gcc", &["-O2", "-fPIE", "-pie", path_str(&src), "-o", path_str(&bin)]);
    let with = inspect_traps(&bin);
    assert_eq!(with["summary"].get("trap_sites"), None, "no site needs a trap: {}", with["summary"]);
    assert_eq!(with["summary"].get("signal_wrappers"), None);
    assert_eq!(signal_wrap_rows(&with), Vec::<String>::new());
    let text = stint(&["inspect", path_str(&bin), "--traps"]);
    assert!(!text.stdout_str().contains("traps:"), "{}", text.stdout_str());
}
