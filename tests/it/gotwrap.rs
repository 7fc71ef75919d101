//! Thread-library wrappers for calls through the GOT (DESIGN D4, issue 12): Rust's std and
//! `-fno-plt` C call `[rip+slot]` and never pass a PLT stub, so the rewriter patches those
//! call sites (`nop; call thunk`, the return address unchanged) to enter the same wrapper
//! thunk as the PLT stub. These tests check that such programs get the thread records and
//! lock data PLT programs get, and that uses no wrapper sees are reported.
//!
//! | tests | program | what it proves |
//! | --- | --- | --- |
//! | `rust::*` | `testbins/rust_threads.rs` (rustc -O) | same output (measured and off); names from `thread::Builder::name`, creator, std's start routine, exit; exact calls of `pthread_create`/`pthread_join`/`pthread_setname_np` and of the program's counted functions; join waits per worker; std's `Mutex::lock_contended` timed as the Rust lock wait (≥ half the 200 ms main holds the lock); `inspect` lists the `got-call` sites and the report warns that futex locks have no lock waits |
//! | `noplt_counts::*` | `locks_counts.c` with `-fno-plt` | same output; exact lock/trylock/timedlock/unlock calls and wait counts per worker as the program's header states, equal to the PLT build's |
//! | `noplt_mutex::*` | `locks_mutex.c` with `-fno-plt` | the waiter's 200 ms wait (contended, BLOCKED_MUTEX) and the holder's hold time, as with the PLT build |
//! | `uncovered_pointer_call` | a C program calling `pthread_mutex_lock` through a function pointer (`-fno-plt`) | `inspect` and the report warn about the call no wrapper sees; the program behaves the same |
//!
//! The runs take a CPU turn (`common::cpu_turn`): the wait checks compare times.

use crate::common::*;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

const RUN_TIMEOUT: Duration = Duration::from_secs(60);
const MS: u64 = 1_000_000;

/// rust_threads.rs: its constants.
const WORKERS: usize = 3;
const JOBS_STEPS: u64 = 300 * 10;
const HOLD_NS: u64 = 200 * MS;

/// The name of Rust std's slow path of a contended `Mutex::lock` (demangled).
const LOCK_CONTENDED: &str = "<std::sys::sync::mutex::futex::Mutex>::lock_contended";

/// A program run three times: the original, rewritten and measuring, rewritten with
/// measurement off.
struct Case {
    label: String,
    original: Outcome,
    rewritten: Outcome,
    off: Outcome,
    report: Value,
    report_text: String,
    lock_text: String,
    inspect: Value,
    inspect_text: String,
}

/// How a test program is built.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Build {
    /// testbins/rust_threads.rs with `rustc -O`.
    Rust,
    /// A testbins C program, `-O2 -fPIE -pie`, with `-fno-plt` or not.
    C { name: &'static str, no_plt: bool },
    /// The function-pointer program of [`uncovered_pointer_call`], `-fno-plt`.
    Pointer,
}

/// A C program that calls `pthread_mutex_lock` only through a function pointer.
const POINTER_C: &str = r#"#include <pthread.h>
#include <stdio.h>
static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
int (*volatile lockfn)(pthread_mutex_t *);
int main(void) {
    lockfn = pthread_mutex_lock;
    lockfn(&m);
    pthread_mutex_unlock(&m);
    puts("locked through a pointer");
    return 0;
}
"#;

fn build_prog(b: Build) -> PathBuf {
    let dir = run_root().join("build-gotwrap");
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    match b {
        Build::Rust => {
            let out = dir.join("rust_threads");
            let src = testbins_dir().join("rust_threads.rs");
            tool("rustc", &["-O", "--edition", "2021", "-o", path_str(&out), path_str(&src)]);
            out
        }
        Build::C { name, no_plt } => {
            let out = dir.join(format!("{name}{}", if no_plt { "-noplt" } else { "-plt" }));
            let src = testbins_dir().join(format!("{name}.c"));
            let inc = testbins_dir();
            let mut args = vec!["-Wall", "-Werror", "-O2", "-fPIE", "-pie", "-pthread"];
            if no_plt {
                args.push("-fno-plt");
            }
            args.extend(["-I", path_str(&inc), path_str(&src), "-o", path_str(&out)]);
            tool("gcc", &args);
            out
        }
        Build::Pointer => {
            let src = dir.join("pointer.c");
            std::fs::write(&src, POINTER_C).unwrap_or_else(|e| panic!("{}: {e}", src.display()));
            let out = dir.join("pointer");
            tool("gcc", &["-Wall", "-Werror", "-O2", "-fno-plt", "-pthread", path_str(&src), "-o", path_str(&out)]);
            out
        }
    }
}

fn run_case(b: Build) -> Case {
    let _turn = cpu_turn();
    let bin = build_prog(b);
    let name = bin.file_name().and_then(|n| n.to_str()).expect("a program name").to_string();
    let label = format!("gotwrap-{name}");
    let dir = fresh_dir(&label);
    let out = dir.join("out").join(&name);
    rewrite(&bin, &out);
    let profiles = dir.join("profiles");
    std::fs::create_dir_all(&profiles).unwrap();
    let run =
        |p: &Path, profile: &str| Run::new(p, &dir).env(stint_layout::ENV_PROFILE, profile).timeout(RUN_TIMEOUT).run();
    let original = Run::new(&bin, &dir).timeout(RUN_TIMEOUT).run();
    let rewritten = run(&out, &profile_template(&profiles, &name));
    let off = run(&out, "");
    let file = profiles.join(format!("{name}.{}.stint", rewritten.pid));
    assert!(file.is_file(), "{label}: no profile {}: {:?}", file.display(), dir_entries(&profiles));
    let report = report_json(&file);
    let text = |by: &[&str]| {
        let mut args = vec!["report", path_str(&file)];
        args.extend(by);
        let o = stint(&args);
        assert!(o.status == 0, "{label}: stint {args:?}: {o:?}");
        o.stdout_str()
    };
    let (report_text, lock_text) = (text(&[]), text(&["--by", "lock"]));
    let inspect_text = stint(&["inspect", path_str(&bin)]);
    assert!(inspect_text.status == 0, "{label}: stint inspect: {inspect_text:?}");
    Case {
        label,
        original,
        rewritten,
        off,
        report,
        report_text,
        lock_text,
        inspect: inspect_json(&bin),
        inspect_text: inspect_text.stdout_str(),
    }
}

fn case(b: Build) -> Arc<Case> {
    static CASES: RunCache<Build, Case> = OnceLock::new();
    cached_run(&CASES, b, &format!("gotwrap {b:?}"), || run_case(b))
}

fn check_same_output(c: &Case) {
    assert!(c.original.status == 0, "{}: the original fails: {:?}", c.label, c.original);
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

fn str_of<'a>(v: &'a Value, key: &str) -> &'a str {
    v[key].as_str().unwrap_or("")
}

/// The threads of a report other than main.
fn others(r: &Value) -> Vec<&Value> {
    threads(r).iter().filter(|t| t["main"] != true).collect()
}

/// The wrap rows of `inspect --json` with a GOT call site, as (import, tactic, caller).
fn got_rows(inspect: &Value) -> Vec<(String, String, String)> {
    let rows = inspect["points"].as_array().expect("inspect lists points");
    rows.iter()
        .filter(|p| p["kind"] == "wrap" && str_of(p, "tactic").starts_with("got-"))
        .map(|p| (str_of(p, "function").into(), str_of(p, "tactic").into(), str_of(p, "caller").into()))
        .collect()
}

mod rust {
    use super::*;

    fn c() -> Arc<Case> {
        case(Build::Rust)
    }

    #[test]
    fn same_output() {
        check_same_output(&c());
    }

    /// Names from `thread::Builder::name` (std calls pthread_setname_np in the new thread),
    /// main as creator, std's `thread_start` as the start routine, a normal return.
    #[test]
    fn names_creators_start_routines() {
        let c = c();
        let main_tid = main_thread(&c.report)["tid"].as_u64().expect("main has a tid");
        let ws = others(&c.report);
        let mut names: Vec<&str> = ws.iter().map(|t| str_of(t, "name")).collect();
        names.sort();
        assert_eq!(names, ["worker-0", "worker-1", "worker-2"], "{}: thread names in {}", c.label, c.report);
        for t in ws {
            assert_eq!(t["creator_tid"].as_u64(), Some(main_tid), "{}: creator of {t}", c.label);
            let start = str_of(t, "start_routine");
            assert!(start.ends_with("::thread_start"), "{}: start routine {start:?} of {t}", c.label);
            assert_eq!(t["exit"], "returned", "{}: exit of {t}", c.label);
        }
        for name in ["worker-0", "worker-1", "worker-2"] {
            assert!(
                c.report_text.contains(&format!("name: {name}  start: <std::")),
                "{}: {name}:\n{}",
                c.label,
                c.report_text
            );
        }
    }

    /// The wrapped imports and the program's own counted functions, exactly.
    #[test]
    fn exact_calls() {
        let c = c();
        let main = main_thread(&c.report);
        let n = WORKERS as u64;
        assert_eq!(
            (calls(main, "pthread_create"), calls(main, "pthread_join"), calls(main, "spawn_workers")),
            (n, n, 1),
            "{}: main's pthread_create, pthread_join, spawn_workers: {main}",
            c.label
        );
        let mut steps = 0;
        for t in others(&c.report) {
            assert_eq!(calls(t, "pthread_setname_np"), 1, "{}: pthread_setname_np on {t}", c.label);
            assert_eq!(calls(t, "worker_loop"), 1, "{}: worker_loop on {t}", c.label);
            assert_eq!(calls(t, "pthread_create"), 0, "{}: pthread_create on a worker: {t}", c.label);
            steps += calls(t, "job_step");
        }
        assert_eq!(steps, JOBS_STEPS, "{}: job_step calls over the workers", c.label);
        assert_eq!(calls(main, "job_step"), 0, "{}: job_step on main", c.label);
    }

    /// `pthread_join` waits: one object of kind `thread` per worker, each joined once by
    /// main, named after the worker; main's BLOCKED_JOIN is their sum.
    #[test]
    fn join_waits() {
        let c = c();
        let main = main_thread(&c.report);
        let waits = main["waits"].as_array().expect("main has waits");
        let joins: Vec<&Value> = waits.iter().filter(|w| w["kind"] == "thread").collect();
        assert_eq!(joins.len(), WORKERS, "{}: join waits of main: {waits:?}", c.label);
        let mut names: Vec<String> =
            joins.iter().map(|w| str_of(w, "object_name").rsplit(' ').next().unwrap_or("").to_string()).collect();
        names.sort();
        assert_eq!(names, ["worker-0", "worker-1", "worker-2"], "{}: joined threads {joins:?}", c.label);
        assert!(joins.iter().all(|w| w["count"] == 1), "{}: each worker is joined once: {joins:?}", c.label);
        let sum: u64 = joins.iter().map(|w| w["wait_ns"].as_u64().unwrap_or(0)).sum();
        let blocked = main["states"]["BLOCKED_JOIN"].as_u64().unwrap_or(0);
        let slack = (2 * MS).max(sum / 20);
        assert!(
            blocked + slack >= sum && blocked <= sum + slack,
            "{}: BLOCKED_JOIN {blocked} vs join waits {sum}",
            c.label
        );
        assert!(
            c.lock_text.contains("first used in: <std::sys::thread::unix::Thread>::join"),
            "{}:\n{}",
            c.label,
            c.lock_text
        );
    }

    /// The lock data a Rust program has: std's futex Mutex is no pthread object, but its
    /// contended slow path is a function of the program, timed like any other. Each worker
    /// blocks there while main holds the lock for 200 ms.
    #[test]
    fn std_lock_wait_is_lock_contended_time() {
        let c = c();
        for t in others(&c.report) {
            let f = func(t, LOCK_CONTENDED).unwrap_or_else(|| panic!("{}: no {LOCK_CONTENDED} on {t}", c.label));
            let wall =
                f["wall_ns"].as_u64().unwrap_or_else(|| panic!("{}: {LOCK_CONTENDED} is not timed: {f}", c.label));
            assert!(
                wall >= HOLD_NS / 2,
                "{}: {LOCK_CONTENDED} {wall} ns on {}, want ≥ {} ns",
                c.label,
                t["name"],
                HOLD_NS / 2
            );
            let life = t["end_ns"].as_u64().unwrap_or(u64::MAX).saturating_sub(t["start_ns"].as_u64().unwrap_or(0));
            assert!(wall <= life, "{}: {LOCK_CONTENDED} {wall} ns longer than the thread's life {life} ns", c.label);
        }
    }

    /// `inspect` lists the GOT call sites it patched; the report and inspect say that
    /// futex locks have no lock waits.
    #[test]
    fn inspect_and_warnings() {
        let c = c();
        let rows = got_rows(&c.inspect);
        for import in ["pthread_create", "pthread_join", "pthread_setname_np"] {
            assert!(
                rows.iter().any(|(f, t, _)| f == import && t == "got-call"),
                "{}: no got-call site of {import} in {rows:?}",
                c.label
            );
        }
        let n = c.inspect["summary"]["wrap_sites"].as_u64().unwrap_or(0);
        assert_eq!(n as usize, rows.len(), "{}: summary.wrap_sites", c.label);
        let warning = "warning: Rust std Mutex/Condvar/RwLock wait on futexes";
        for (what, text) in
            [("inspect", &c.inspect_text), ("report", &c.report_text), ("report --by lock", &c.lock_text)]
        {
            assert!(text.contains(warning), "{}: {what} does not warn about futex locks:\n{text}", c.label);
        }
    }
}

/// The per-worker signature of a locks_counts report: (lock, trylock, timedlock, unlock
/// calls, [(object name, wait count, contended)] sorted), sorted by lock calls.
type Signature = (u64, u64, u64, u64, Vec<(String, u64, u64)>);

fn signatures(r: &Value) -> Vec<Signature> {
    let mut v: Vec<Signature> = others(r)
        .into_iter()
        .map(|t| {
            let mut waits: Vec<(String, u64, u64)> = t["waits"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|w| {
                    (
                        str_of(w, "object_name").to_string(),
                        w["count"].as_u64().unwrap_or(0),
                        w["contended"].as_u64().unwrap_or(0),
                    )
                })
                .collect();
            waits.sort();
            (
                calls(t, "pthread_mutex_lock"),
                calls(t, "pthread_mutex_trylock"),
                calls(t, "pthread_mutex_timedlock"),
                calls(t, "pthread_mutex_unlock"),
                waits,
            )
        })
        .collect();
    v.sort();
    v
}

mod noplt_counts {
    use super::*;

    fn c(no_plt: bool) -> Arc<Case> {
        case(Build::C { name: "locks_counts", no_plt })
    }

    #[test]
    fn same_output() {
        check_same_output(&c(true));
    }

    /// The counts locks_counts.c's header states, per worker k = 1, 2, 3.
    #[test]
    fn exact_counts() {
        let c = c(true);
        let got = signatures(&c.report);
        let want: Vec<(u64, u64, u64, u64)> =
            (1..=3).map(|k| (k * 1000 + 200, k * 150, k * 100, k * 1150 + 200)).collect();
        let got_calls: Vec<(u64, u64, u64, u64)> = got.iter().map(|s| (s.0, s.1, s.2, s.3)).collect();
        assert_eq!(got_calls, want, "{}: (lock, trylock, timedlock, unlock) per worker", c.label);
        for (k, s) in (1..=3u64).zip(&got) {
            let shared = s.4.iter().find(|w| w.0 == "shared");
            assert_eq!(shared.map(|w| w.1), Some(200), "{}: waits on shared of worker {k}: {:?}", c.label, s.4);
            let private: Vec<_> = s.4.iter().filter(|w| w.0 != "shared").collect();
            assert_eq!(private.len(), 1, "{}: worker {k} uses one private mutex: {:?}", c.label, s.4);
            assert_eq!((private[0].1, private[0].2), (k * 1150, k * 100), "{}: worker {k}'s private mutex", c.label);
        }
        let main = main_thread(&c.report);
        assert_eq!((calls(main, "pthread_create"), calls(main, "pthread_join")), (3, 3), "{}: main: {main}", c.label);
    }

    /// The -fno-plt build gives what the PLT build gives.
    #[test]
    fn like_plt() {
        let (noplt, plt) = (c(true), c(false));
        check_same_output(&plt);
        // Whether the shared mutex was found busy depends on the scheduling of the run; the
        // private mutexes' contention is the program's own (timedlock on a held mutex).
        let exact = |r: &Value| {
            let mut v = signatures(r);
            v.iter_mut().flat_map(|s| s.4.iter_mut()).filter(|w| w.0 == "shared").for_each(|w| w.2 = 0);
            v
        };
        assert_eq!(exact(&noplt.report), exact(&plt.report), "{} vs {}", noplt.label, plt.label);
        // `_start` calls `__libc_start_main` through the GOT in every build (D22: its thunk
        // records main's return); no thread-library function is called so in a PLT build.
        let plt_rows: Vec<_> = got_rows(&plt.inspect).into_iter().filter(|r| r.0 != "__libc_start_main").collect();
        assert!(plt_rows.is_empty(), "{}: GOT wrap sites in a PLT build: {plt_rows:?}", plt.label);
        assert!(!got_rows(&noplt.inspect).is_empty(), "{}: no GOT wrap sites", noplt.label);
        assert!(!noplt.inspect_text.contains("warning:"), "{}: inspect warns:\n{}", noplt.label, noplt.inspect_text);
    }
}

mod noplt_mutex {
    use super::*;

    fn c() -> Arc<Case> {
        case(Build::C { name: "locks_mutex", no_plt: true })
    }

    fn by_start<'a>(r: &'a Value, routine: &str) -> &'a Value {
        others(r)
            .into_iter()
            .find(|t| t["start_routine"] == routine)
            .unwrap_or_else(|| panic!("no thread from {routine}: {r}"))
    }

    #[test]
    fn same_output() {
        check_same_output(&c());
    }

    /// The waiter blocks on m while the holder keeps it 200 ms (locks_mutex.c).
    #[test]
    fn waiter_wait_and_holder_hold() {
        let c = c();
        let waiter = by_start(&c.report, "waiter");
        let w = waiter["waits"].as_array().and_then(|ws| ws.iter().find(|w| w["kind"] == "mutex")).cloned();
        let w = w.unwrap_or_else(|| panic!("{}: no mutex wait on the waiter: {waiter}", c.label));
        assert_eq!((w["count"].as_u64(), w["contended"].as_u64()), (Some(1), Some(1)), "{}: {w}", c.label);
        let wait = w["wait_ns"].as_u64().unwrap_or(0);
        assert!(wait >= 150 * MS, "{}: the waiter waited {wait} ns, want ≥ 150 ms", c.label);
        let blocked = waiter["states"]["BLOCKED_MUTEX"].as_u64().unwrap_or(0);
        assert!(blocked + 2 * MS >= wait, "{}: BLOCKED_MUTEX {blocked} < wait {wait}", c.label);
        let holder = by_start(&c.report, "holder");
        let hold: u64 =
            holder["waits"].as_array().into_iter().flatten().map(|w| w["hold_ns"].as_u64().unwrap_or(0)).sum();
        assert!(hold >= 190 * MS, "{}: the holder held m {hold} ns, want ≥ 190 ms", c.label);
    }
}

/// A call through a function pointer passes no patched site: inspect and the report say so.
#[test]
fn uncovered_pointer_call() {
    let c = case(Build::Pointer);
    check_same_output(&c);
    let want = "warning: pthread_mutex_lock: calls no wrapper sees";
    assert!(c.inspect_text.contains(want), "{}: inspect:\n{}", c.label, c.inspect_text);
    assert!(c.report_text.contains(want), "{}: report:\n{}", c.label, c.report_text);
    let notes = c.inspect["unwrapped"].as_array().map(Vec::len);
    assert_eq!(notes, Some(1), "{}: inspect --json unwrapped: {}", c.label, c.inspect["unwrapped"]);
    assert_eq!(c.inspect["summary"]["wrap_uses_uncovered"], 1, "{}: summary", c.label);
    // pthread_mutex_unlock is called directly: covered.
    let rows = got_rows(&c.inspect);
    assert!(rows.iter().any(|(f, _, _)| f == "pthread_mutex_unlock"), "{}: {rows:?}", c.label);
    assert_eq!(calls(main_thread(&c.report), "pthread_mutex_unlock"), 1, "{}: {}", c.label, c.report);
}
