//! Thread-library wrappers (DESIGN D4, D14; issue 4): every PLT call to a pthread or
//! semaphore function goes through a wrapper that records, per thread and per sync object,
//! the wall time blocked and the thread's state. These tests check the report's thread
//! records, `waits`, `states` and `objects` against what the test programs know about
//! themselves.
//!
//! Each program in `testbins/locks_*.c` (built by the harness with gcc) and
//! `testbins/locks_cancelpp.cpp` (built here with g++) is built in the variants its
//! `//# variants:` directive names (`pie-O2` and `nopie-O0`), rewritten with the default
//! spec, and run three times: the original, the rewritten program measuring, and the
//! rewritten program with measurement off (`STINT_PROFILE=`). All three must behave byte
//! for byte the same (stdout, stderr, exit status). The programs print nothing that
//! depends on timing; what they measure themselves (their tids, the addresses of their
//! sync objects and `pthread_t`s, the wall time of chosen calls around the call) goes to
//! the side file named by `TIMES_FILE` (one line per fact: `KEY WORD... NUMBER...`, see
//! each program's header), which the checks read.
//!
//! Report fields checked (`stint report --format json`):
//!
//! - `threads[]`: `name` (the `pthread_setname_np` name, else the comm at start),
//!   `start_routine` (null for main), `creator_tid`, `start_ns`, `end_ns`, `exit`
//!   (`returned` | `pthread_exit` | `canceled` | `unknown`), `exit_value`, `state`,
//!   `states` (ns per state), `waits[]` ({object, kind, wait_ns, count, contended,
//!   hold_ns}), and the calls of wrapped functions in `functions[]` under the import's name.
//! - `objects[]`: {address, kind, first_used_in, first_tid}.
//!
//! Exact: counts of calls and of waits (`count`: acquisitions and finished waits; unlock,
//! signal, broadcast and post are no waits), `contended` where the program fixes it
//! (a mutex found locked; a trylock returning EBUSY is contended without a count), names,
//! start routines, creators, exits and exit values, kinds, and the function and thread that
//! first used an object (each program fixes which call comes first).
//!
//! Times, with the tolerance each message repeats:
//!
//! | check | tolerance |
//! | --- | --- |
//! | a wait the program arranged (holder sleeps 200 ms / 100 ms) | the bound the issue states (≥ 150 ms, ≥ 80 ms, hold ≥ 190 ms) and at most the program's own measurement around the call + 20 ms |
//! | `wait_ns` summed over many calls against the program's sum around the same calls | profile ≤ program + max(3 ms, 5 %); profile ≥ program − max(3 ms, 5 %) − 5 µs per call |
//! | `states` against `waits` of the same thread (every thread of every report) | BLOCKED_X ≥ Σ wait_ns of kind X − max(2 ms, 5 %); for threads not cancelled also ≤ + max(2 ms, 5 %) |
//! | a thread's lifetime | RUN + all BLOCKED_* ≤ end_ns − start_ns + max(2 ms, 5 %) |
//!
//! The cases of this file take turns (one lock around build, rewrite and runs), as in
//! `timers.rs`, so they do not steal each other's CPU (`common::cpu_turn`, shared with
//! `timers`, `control` and `top`).
//!
//! Each (program, variant) runs once, in whichever of its tests comes first, and each check
//! is its own `#[test]` (`common::checks`): `locks::mutex_hold::pie_o2::same_output`, …
//! `::waiter_wait`. Every case has the checks of its runs (`exit_status`, `same_output`,
//! `same_output_off`, `no_files_left`, `side_files_agree`) and of its report
//! (`report_invariants`, `lock_invariants`, `threads_directive`), then those its program's
//! check function names (the list in `lock_tests!`).
//!
//! | tests | program | what it checks |
//! | --- | --- | --- |
//! | `mutex_hold::*` | `locks_mutex.c` | a 200 ms hold: the waiter's wait, contended, BLOCKED_MUTEX; the holder's `hold_ns` |
//! | `condvar_queue::*` | `locks_condvar.c` | bounded queue: exact lock and cond-wait counts, BLOCKED_CONDVAR, objects with `first_used_in` |
//! | `rwlock_writer::*` | `locks_rwlock.c` | readers blocked behind a 100 ms write lock: BLOCKED_RWLOCK, counts, writer's hold |
//! | `semaphore_pipeline::*` | `locks_sem.c` | 3 stages × 500 tokens: exact `sem_wait` counts, posts are no waits |
//! | `joins_and_names::*` | `locks_join.c` | start routines, names, creators, exits, exit values, joins (kind `thread`), BLOCKED_JOIN |
//! | `barrier_rounds::*` | `locks_barrier.c` | 4 threads × 100 rounds: exact barrier counts, BLOCKED_BARRIER |
//! | `cancel_cleanup::*` | `locks_cancel.c` | `pthread_cancel` in `pthread_cond_wait`, cleanup handler; exit `canceled` |
//! | `cancel_destructor::*` | `locks_cancelpp.cpp` | the same in C++: a destructor runs in the forced unwinding through the wrapper |
//! | `mutex_call_counts::*` | `locks_counts.c` | exact calls of lock/trylock/timedlock/unlock per thread, exact `contended` |
//! | `mutex_kinds::*`, `mutex_kinds_traced::*`, `mutex_kinds_calls::*` | `locks_kinds.c` | normal, error-checking, recursive, robust and PI mutexes: exact counts, `contended` and calls, holds, under the default spec (the fast path), with `state_trace` on (the full path) and calls with the lock metrics off (counted in the thunk) |
//! | `lock_metrics_off_at_start::*` | `locks_mutex.c` | spec with lock_wait, lock_hold, state_trace off at start: no waits, same output |
//! | `pigz_locks` | `/usr/bin/pigz` | a real program: identical output, mutex and condvar objects, waits; prints `--by lock` |
//! | `originals_behave` | all | needs no rewriter: every original builds, runs deterministically and writes its side file |

use crate::common::*;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

/// A run that takes longer is killed (a deadlock in a wrapper) and fails the test.
const RUN_TIMEOUT: Duration = Duration::from_secs(60);

/// One millisecond in ns.
const MS: u64 = 1_000_000;

const STATES: [&str; 8] = [
    "RUN",
    "BLOCKED_MUTEX",
    "BLOCKED_CONDVAR",
    "BLOCKED_RWLOCK",
    "BLOCKED_SEMAPHORE",
    "BLOCKED_JOIN",
    "BLOCKED_BARRIER",
    "EXITED",
];
const KINDS: [&str; 6] = ["mutex", "condvar", "rwlock", "semaphore", "barrier", "thread"];
const EXITS: [&str; 4] = ["returned", "pthread_exit", "canceled", "unknown"];

/// The state a thread is in while it waits on an object of `kind`.
fn blocked_state(kind: &str) -> &'static str {
    match kind {
        "mutex" => "BLOCKED_MUTEX",
        "condvar" => "BLOCKED_CONDVAR",
        "rwlock" => "BLOCKED_RWLOCK",
        "semaphore" => "BLOCKED_SEMAPHORE",
        "thread" => "BLOCKED_JOIN",
        "barrier" => "BLOCKED_BARRIER",
        other => panic!("no state for kind {other}"),
    }
}

/// The programs of this file; the C++ ones end in `pp`.
const PROGRAMS: &[&str] = &[
    "locks_mutex",
    "locks_condvar",
    "locks_rwlock",
    "locks_sem",
    "locks_join",
    "locks_barrier",
    "locks_cancel",
    "locks_cancelpp",
    "locks_counts",
    "locks_kinds",
];

fn ms(ns: u64) -> String {
    format!("{:.3} ms", ns as f64 / MS as f64)
}

// ---------------------------------------------------------------------------------------
// Programs, builds, runs
// ---------------------------------------------------------------------------------------

/// Which spec the program is rewritten with.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum SpecChoice {
    /// The built-in default spec.
    Default,
    /// The default spec with `lock_wait`, `lock_hold` and `state_trace` off at start.
    LocksOff,
    /// `calls`, `lock_wait`, `lock_hold` and `state_trace`: every mutex call takes the
    /// wrappers' full path (the fast path records no state transitions).
    Traced,
    /// `calls` on, `lock_wait` and `lock_hold` defined but off at start: the wrappers are
    /// there, and their thunks count the calls by themselves.
    CallsOnly,
}

/// The spec of `choice` (`None`: the built-in default), written into `dir`.
fn spec_file(choice: SpecChoice, dir: &Path) -> Option<PathBuf> {
    let text = match choice {
        SpecChoice::Default => return None,
        SpecChoice::LocksOff => return Some(locks_off_spec(dir)),
        SpecChoice::Traced => {
            "metrics:\n  - {name: calls, kind: counter, at: entry, on_at_start: true}\n  \
             - {name: lock_wait, kind: wait, at: sync_calls, on_at_start: true}\n  \
             - {name: lock_hold, kind: wait, at: sync_calls, on_at_start: true}\n  \
             - {name: state_trace, kind: trace, at: sync_calls, on_at_start: true}\n"
        }
        SpecChoice::CallsOnly => {
            "metrics:\n  - {name: calls, kind: counter, at: entry, on_at_start: true}\n  \
             - {name: lock_wait, kind: wait, at: sync_calls, on_at_start: false}\n  \
             - {name: lock_hold, kind: wait, at: sync_calls, on_at_start: false}\n"
        }
    };
    let out = dir.join(format!("{choice:?}.yaml"));
    std::fs::write(&out, text).unwrap_or_else(|e| panic!("{}: {e}", out.display()));
    Some(out)
}

/// The default spec (`specs/default.yaml`) with the lock metrics off at start, written to
/// `dir/locks-off.yaml`. Fails if the default spec lacks one of them.
fn locks_off_spec(dir: &Path) -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../specs/default.yaml");
    let text = std::fs::read_to_string(&src).unwrap_or_else(|e| panic!("{}: {e}", src.display()));
    let mut spec: serde_yaml_ng::Value =
        serde_yaml_ng::from_str(&text).unwrap_or_else(|e| panic!("{}: not YAML: {e}", src.display()));
    let metrics = spec
        .get_mut("metrics")
        .and_then(|m| m.as_sequence_mut())
        .unwrap_or_else(|| panic!("{}: no metrics list", src.display()));
    let mut found = BTreeSet::new();
    for m in metrics.iter_mut() {
        let name = m.get("name").and_then(|n| n.as_str()).unwrap_or("").to_string();
        if ["lock_wait", "lock_hold", "state_trace"].contains(&name.as_str()) {
            let map = m.as_mapping_mut().expect("a metric is a mapping");
            map.insert("on_at_start".into(), false.into());
            found.insert(name);
        }
    }
    let want: BTreeSet<String> = ["lock_hold", "lock_wait", "state_trace"].iter().map(|s| s.to_string()).collect();
    assert!(
        found == want,
        "{}: the default spec should define the metrics {want:?}; it defines {found:?} of them:\n{text}",
        src.display()
    );
    let out = dir.join("locks-off.yaml");
    std::fs::write(&out, serde_yaml_ng::to_string(&spec).expect("spec to YAML"))
        .unwrap_or_else(|e| panic!("{}: {e}", out.display()));
    out
}

/// The lines of a side file: words, the first being the key.
struct Side {
    rows: Vec<Vec<String>>,
    text: String,
}

/// A number as the programs write it: decimal, or `0x` + hex.
fn number(w: &str) -> Option<u64> {
    match w.strip_prefix("0x") {
        Some(h) => u64::from_str_radix(h, 16).ok(),
        None => w.parse().ok(),
    }
}

impl Side {
    fn read(path: &Path) -> Result<Side, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let mut rows = Vec::new();
        for (i, line) in text.lines().enumerate() {
            let words: Vec<String> = line.split_whitespace().map(str::to_string).collect();
            if words.len() < 2 {
                return Err(format!("{}:{}: {line:?}: want `KEY WORD...`", path.display(), i + 1));
            }
            rows.push(words);
        }
        Ok(Side { rows, text })
    }

    /// The words of each line that are not numbers, sorted: what two runs must share.
    fn shape(&self) -> Vec<String> {
        let mut v: Vec<String> = self
            .rows
            .iter()
            .map(|r| r.iter().filter(|w| number(w).is_none()).cloned().collect::<Vec<_>>().join(" "))
            .collect();
        v.sort();
        v
    }

    /// The numbers of the one line that starts with `words`.
    fn nums(&self, words: &[&str]) -> Vec<u64> {
        let hits: Vec<&Vec<String>> =
            self.rows.iter().filter(|r| r.len() >= words.len() && r.iter().zip(words).all(|(a, b)| a == b)).collect();
        let [row] = hits[..] else {
            panic!("side file: want exactly one line `{} ...`, found {}:\n{}", words.join(" "), hits.len(), self.text);
        };
        row[words.len()..]
            .iter()
            .map(|w| number(w).unwrap_or_else(|| panic!("side file: {row:?}: {w:?} is not a number")))
            .collect()
    }

    /// The single number of the line that starts with `words`.
    fn num(&self, words: &[&str]) -> u64 {
        match self.nums(words)[..] {
            [n] => n,
            ref v => panic!("side file: `{}` has {} numbers, want 1:\n{}", words.join(" "), v.len(), self.text),
        }
    }

    fn tid(&self, role: &str) -> u64 {
        self.num(&["tid", role])
    }
}

/// Everything one test run produced.
struct Case {
    /// `program variant [spec]`, for messages.
    ctx: String,
    p: Program,
    measured_pid: u32,
    profile: PathBuf,
    report: Value,
    /// The side file of the measured run.
    side: Side,
    /// The failures of the checks on the runs themselves ([`RUN_CHECKS`]), by check.
    run_problems: Vec<(&'static str, String)>,
}

/// The checks on the three runs of a case, made by `run_case`.
const RUN_CHECKS: [&str; 5] = ["exit_status", "same_output", "same_output_off", "no_files_left", "side_files_agree"];

/// The run of `name` in `variant` with `spec`: made once per test process (under the CPU
/// turn) by the first check that needs it.
fn case(name: &'static str, variant: &str, spec: SpecChoice) -> Arc<Case> {
    static CASES: RunCache<(&'static str, Variant, SpecChoice), Case> = OnceLock::new();
    let v = Variant::parse(variant).unwrap_or_else(|| panic!("unknown variant {variant}"));
    cached_run(&CASES, (name, v, spec), &format!("{name} {variant} {spec:?}"), || run_case(name, v, spec))
}

/// Build `name` in `variant`, rewrite it with `spec`, run the original, the rewritten
/// program measuring and the rewritten program not measuring (each with its own
/// `TIMES_FILE`), check that all three behave the same (recorded in `run_problems`) and that
/// one profile was written, and read its report.
fn run_case(name: &str, variant: Variant, spec: SpecChoice) -> Case {
    let p = program(name);
    let ctx = match spec {
        SpecChoice::Default => format!("{name} {variant}"),
        SpecChoice::LocksOff => format!("{name} {variant} (lock metrics off at start)"),
        SpecChoice::Traced => format!("{name} {variant} (calls, lock metrics and state_trace)"),
        SpecChoice::CallsOnly => format!("{name} {variant} (calls on, lock metrics off)"),
    };
    assert!(p.variants.contains(&variant), "{ctx}: the program's `variants:` directive does not list {variant}");
    let _turn = cpu_turn();
    let bin = build(&p, variant);
    let label = format!("{name}-{variant}-{spec:?}");
    let dir = fresh_dir(&format!("locks-{label}"));
    let out = run_root().join("locks").join("rewritten").join(&label).join(name);
    match spec_file(spec, &dir) {
        None => rewrite(&bin, &out),
        Some(spec_file) => {
            std::fs::create_dir_all(out.parent().unwrap()).unwrap_or_else(|e| panic!("{}: {e}", out.display()));
            let o = stint(&["rewrite", path_str(&bin), "-o", path_str(&out), "--spec", path_str(&spec_file)]);
            assert!(o.status == 0, "{ctx}: stint rewrite --spec {} failed: {o:?}", spec_file.display());
        }
    }
    let profiles = dir.join("profiles");
    std::fs::create_dir_all(&profiles).unwrap_or_else(|e| panic!("{}: {e}", profiles.display()));
    let cwd = dir.join("cwd");
    std::fs::create_dir_all(&cwd).unwrap_or_else(|e| panic!("{}: {e}", cwd.display()));
    let (orig_side, rw_side, quiet_side) =
        (dir.join("original.side"), dir.join("rewritten.side"), dir.join("quiet.side"));
    let template = profile_template(&profiles, name);
    let args = &p.args;
    let mut run_problems = Vec::new();
    let mut want = |check: &'static str, ok: bool, msg: &dyn Fn() -> String| {
        if !ok {
            run_problems.push((check, msg()));
        }
    };

    let original = Run::new(&bin, &cwd).args(args).env("TIMES_FILE", path_str(&orig_side)).timeout(RUN_TIMEOUT).run();
    want("exit_status", original.status == p.exit, &|| {
        format!(
            "{ctx}: the original exits with {}, the directives say `exit: {}`\n{original:?}",
            original.status, p.exit
        )
    });
    let measured = Run::new(&out, &cwd)
        .args(args)
        .env(stint_layout::ENV_PROFILE, &template)
        .env("TIMES_FILE", path_str(&rw_side))
        .timeout(RUN_TIMEOUT)
        .run();
    want("same_output", original.same_behaviour(&measured), &|| {
        format!(
            "{ctx}: the rewritten program (STINT_PROFILE={template}) behaves differently\n{}",
            describe_difference("original", &original, "rewritten", &measured)
        )
    });
    let quiet = Run::new(&out, &cwd)
        .args(args)
        .env(stint_layout::ENV_PROFILE, "")
        .env("TIMES_FILE", path_str(&quiet_side))
        .timeout(RUN_TIMEOUT)
        .run();
    want("same_output_off", original.same_behaviour(&quiet), &|| {
        format!(
            "{ctx}: the rewritten program with STINT_PROFILE= (off) behaves differently\n{}",
            describe_difference("original", &original, "rewritten, off", &quiet)
        )
    });
    let left = dir_entries(&cwd);
    want("no_files_left", left.is_empty(), &|| {
        format!("{ctx}: the runs left files in their working directory: {left:?}")
    });

    let side_o = Side::read(&orig_side).unwrap_or_else(|e| panic!("{ctx}: the original's side file: {e}"));
    let side = Side::read(&rw_side).unwrap_or_else(|e| panic!("{ctx}: the rewritten program's side file: {e}"));
    want("side_files_agree", side_o.shape() == side.shape(), &|| {
        format!(
            "{ctx}: the side files of the original and the rewritten run have different lines:\n{}\n---\n{}",
            side_o.text, side.text
        )
    });
    let files = dir_entries(&profiles);
    let want = format!("{name}.{}.stint", measured.pid);
    assert!(files == [want.clone()], "{ctx}: profiles {files:?} in {}, want just {want}", profiles.display());
    let profile = profiles.join(&want);
    let report = report_json(&profile);
    Case { ctx, p, measured_pid: measured.pid, profile, report, side, run_problems }
}

/// The test of one of [`RUN_CHECKS`] on a case.
fn run_check(case: &Case, check: &str) {
    assert!(RUN_CHECKS.contains(&check), "{}: no run check {check:?}", case.ctx);
    let problems = problems_of(&case.run_problems, check);
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

// ---------------------------------------------------------------------------------------
// Reading a report
// ---------------------------------------------------------------------------------------

/// One entry of a thread's `waits`.
#[derive(Clone, Debug)]
struct Wait {
    object: u64,
    kind: String,
    wait_ns: u64,
    count: u64,
    contended: u64,
    hold_ns: u64,
}

/// The `waits` of a thread; entries that do not parse are reported by `lock_invariants`
/// and left out here.
fn waits(t: &Value) -> Vec<Wait> {
    let Some(ws) = t.get("waits").and_then(Value::as_array) else { return Vec::new() };
    ws.iter()
        .filter_map(|w| {
            let u = |k: &str| w.get(k).and_then(Value::as_u64);
            Some(Wait {
                object: w.get("object").and_then(Value::as_str).and_then(hex_address)?,
                kind: w.get("kind").and_then(Value::as_str)?.to_string(),
                wait_ns: u("wait_ns")?,
                count: u("count")?,
                contended: u("contended")?,
                hold_ns: u("hold_ns")?,
            })
        })
        .collect()
}

/// `0x…` → its value.
fn hex_address(s: &str) -> Option<u64> {
    is_report_address(s).then(|| u64::from_str_radix(&s[2..], 16).ok()).flatten()
}

/// ns a thread spent in `state`, if the report says.
fn state_ns(t: &Value, state: &str) -> Option<u64> {
    t.get("states").and_then(|s| s.get(state)).and_then(Value::as_u64)
}

/// Calls of the function named `name` in a thread (0 if not listed).
fn calls_named(t: &Value, name: &str) -> u64 {
    t.get("functions")
        .and_then(Value::as_array)
        .map(|fs| {
            fs.iter()
                .filter(|f| f.get("name").and_then(Value::as_str) == Some(name))
                .filter_map(|f| f.get("calls").and_then(Value::as_u64))
                .sum()
        })
        .unwrap_or(0)
}

fn tid_of(t: &Value) -> u64 {
    t.get("tid").and_then(Value::as_u64).unwrap_or(0)
}

/// The checks of the thread and object records every report of this file must pass
/// (pigz's too). Returns the problems.
fn lock_invariants(r: &Value) -> Vec<String> {
    let mut bad = Vec::new();
    let tol = |ns: u64| (2 * MS).max(ns / 20);
    let threads = r.get("threads").and_then(Value::as_array).map(Vec::as_slice).unwrap_or(&[]);
    let tids: BTreeSet<u64> = threads.iter().map(tid_of).collect();
    // (address, kind): an address may come back as another kind of object once the memory
    // is freed and reused (pigz frees its locks), but one (address, kind) is one object.
    let mut objects: BTreeSet<(u64, String)> = BTreeSet::new();
    match r.get("objects").and_then(Value::as_array) {
        None => bad.push(format!("objects is {}, want an array", shown(r.get("objects")))),
        Some(os) => {
            for o in os {
                let addr = o.get("address").and_then(Value::as_str).and_then(hex_address);
                let kind = o.get("kind").and_then(Value::as_str).filter(|k| KINDS.contains(k));
                let first = o.get("first_used_in").and_then(Value::as_str).filter(|f| !f.is_empty());
                let first_tid = o.get("first_tid").and_then(Value::as_u64);
                let (Some(addr), Some(kind), Some(_), Some(first_tid)) = (addr, kind, first, first_tid) else {
                    bad.push(format!(
                        "object {o}: want address \"0x<hex>\", kind one of {KINDS:?}, first_used_in a function name, \
                         first_tid a tid"
                    ));
                    continue;
                };
                if !tids.contains(&first_tid) {
                    bad.push(format!("object {o}: first_tid {first_tid} is no thread of the report"));
                }
                if !objects.insert((addr, kind.to_string())) {
                    bad.push(format!("{kind} {addr:#x} listed twice in objects[]"));
                }
            }
        }
    }
    for t in threads {
        let tid = tid_of(t);
        let is_main = t.get("main").and_then(Value::as_bool) == Some(true);
        let label = format!("thread {tid}");
        if t.get("name").and_then(Value::as_str).is_none_or(str::is_empty) {
            bad.push(format!("{label}: name is {}, want a string (set name or comm at start)", shown(t.get("name"))));
        }
        if is_main && !t.get("start_routine").is_some_and(Value::is_null) {
            bad.push(format!("{label}: main thread's start_routine is {}, want null", shown(t.get("start_routine"))));
        }
        if !t.get("creator_tid").is_some_and(|c| c.is_null() || c.is_u64()) {
            bad.push(format!("{label}: creator_tid is {}, want a tid or null", shown(t.get("creator_tid"))));
        }
        let start = t.get("start_ns").and_then(Value::as_u64);
        if start.is_none() {
            bad.push(format!("{label}: start_ns is {}, want ns", shown(t.get("start_ns"))));
        }
        let end = match t.get("end_ns") {
            Some(Value::Null) => None,
            Some(v) if v.is_u64() => v.as_u64(),
            v => {
                bad.push(format!("{label}: end_ns is {}, want ns or null", shown(v)));
                None
            }
        };
        if let (Some(s), Some(e)) = (start, end) {
            if e < s {
                bad.push(format!("{label}: end_ns {e} < start_ns {s}"));
            }
        }
        let exit = t.get("exit").and_then(Value::as_str);
        if !exit.is_some_and(|e| EXITS.contains(&e)) {
            bad.push(format!("{label}: exit is {}, want one of {EXITS:?}", shown(t.get("exit"))));
        }
        if !t.get("exit_value").is_some_and(|v| v.is_null() || v.is_u64() || v.is_i64()) {
            bad.push(format!("{label}: exit_value is {}, want an integer or null", shown(t.get("exit_value"))));
        }
        if !t.get("state").and_then(Value::as_str).is_some_and(|s| STATES.contains(&s)) {
            bad.push(format!("{label}: state is {}, want one of {STATES:?}", shown(t.get("state"))));
        }
        match t.get("states").and_then(Value::as_object) {
            None => bad.push(format!("{label}: states is {}, want an object", shown(t.get("states")))),
            Some(m) => {
                let keys: BTreeSet<&str> = m.keys().map(String::as_str).collect();
                if keys != STATES.iter().copied().collect() || m.values().any(|v| !v.is_u64()) {
                    bad.push(format!(
                        "{label}: states is {}, want ns for exactly {STATES:?}",
                        Value::Object(m.clone())
                    ));
                }
            }
        }
        let ws = match t.get("waits").and_then(Value::as_array) {
            None => {
                bad.push(format!("{label}: waits is {}, want an array", shown(t.get("waits"))));
                continue;
            }
            Some(ws) => ws,
        };
        let parsed = waits(t);
        if parsed.len() != ws.len() {
            bad.push(format!(
                "{label}: some waits lack object \"0x<hex>\", kind, wait_ns, count, contended or hold_ns: {}",
                Value::Array(ws.clone())
            ));
        }
        let mut seen = BTreeSet::new();
        for w in &parsed {
            if !KINDS.contains(&w.kind.as_str()) {
                bad.push(format!("{label}: wait on {:#x} has kind {:?}, want one of {KINDS:?}", w.object, w.kind));
                continue;
            }
            if !seen.insert((w.object, w.kind.clone())) {
                bad.push(format!("{label}: {} {:#x} appears twice in waits", w.kind, w.object));
            }
            if !objects.contains(&(w.object, w.kind.clone())) {
                bad.push(format!("{label}: waits on {} {:#x}, which objects[] does not list", w.kind, w.object));
            }
            if w.hold_ns > 0 && !["mutex", "rwlock"].contains(&w.kind.as_str()) {
                bad.push(format!(
                    "{label}: hold_ns {} on {} {:#x}: only mutexes and rwlocks are held",
                    w.hold_ns, w.kind, w.object
                ));
            }
        }
        // States against waits: a thread blocked in calls on objects of kind X is in
        // BLOCKED_X for that time, and (unless a wait never returned, as in a
        // cancellation) in BLOCKED_X for no other time.
        let canceled = exit == Some("canceled");
        for kind in KINDS {
            let st = blocked_state(kind);
            let (Some(s), waited) =
                (state_ns(t, st), parsed.iter().filter(|w| w.kind == kind).map(|w| w.wait_ns).sum::<u64>())
            else {
                continue;
            };
            if s + tol(waited) < waited {
                bad.push(format!(
                    "{label}: {st} is {}, but its waits of kind {kind} sum to {}; want {st} >= that - max(2 ms, 5 %)",
                    ms(s),
                    ms(waited)
                ));
            }
            if !canceled && s > waited + tol(waited) {
                bad.push(format!(
                    "{label}: {st} is {}, but its waits of kind {kind} sum to only {}; want {st} <= that + max(2 ms, 5 %)",
                    ms(s),
                    ms(waited)
                ));
            }
        }
        if let (Some(s), Some(e)) = (start, end) {
            let alive: u64 = STATES.iter().filter(|s| **s != "EXITED").filter_map(|st| state_ns(t, st)).sum();
            let life = e.saturating_sub(s);
            if alive > life + tol(life) {
                bad.push(format!(
                    "{label}: RUN + BLOCKED_* = {}, more than its life end_ns - start_ns = {} + max(2 ms, 5 %)",
                    ms(alive),
                    ms(life)
                ));
            }
        }
    }
    bad
}

/// A JSON value as text, or `missing`.
fn shown(v: Option<&Value>) -> String {
    v.map(Value::to_string).unwrap_or_else(|| "missing".into())
}

// ---------------------------------------------------------------------------------------
// Checking a report
// ---------------------------------------------------------------------------------------

/// Collects the failed checks of one case, each under the check (section) it belongs to;
/// the tests of the case's checks then fail on theirs (`common::checks`).
struct Checker<'c> {
    case: &'c Case,
    found: Findings,
}

impl<'c> Checker<'c> {
    /// A checker that has already run the generic checks: `report_invariants`,
    /// `lock_invariants`, and the directives `threads N`.
    fn new(case: &'c Case) -> Self {
        let mut c = Checker { case, found: Findings::new("report_invariants") };
        for m in report_invariants(&case.report, &case.p.name, case.measured_pid, false) {
            c.fail(format!("report: {m}"));
        }
        c.section("lock_invariants");
        for m in lock_invariants(&case.report) {
            c.fail(format!("report: {m}"));
        }
        c.section("threads_directive");
        for e in &case.p.expects {
            if let Check::Threads(n) = e.check {
                let got = c.threads().len() as u64;
                if got != n {
                    c.fail(format!("line {}: expect: threads {n}: the report lists {got} threads", e.line));
                }
            }
        }
        c
    }

    /// The checks from here on belong to the check `name` (one `#[test]`).
    fn section(&mut self, name: &str) {
        self.found.section(name);
    }

    fn fail(&mut self, msg: String) {
        self.found.fail(msg);
    }

    fn threads(&self) -> &'c [Value] {
        self.case.report.get("threads").and_then(Value::as_array).map(Vec::as_slice).unwrap_or(&[])
    }

    /// The thread whose tid the program wrote as `tid ROLE N`.
    fn thread(&mut self, role: &str) -> Option<&'c Value> {
        let tid = self.case.side.tid(role);
        let t = self.threads().iter().find(|t| tid_of(t) == tid);
        if t.is_none() {
            let tids: Vec<u64> = self.threads().iter().map(tid_of).collect();
            self.fail(format!("{role}: the program ran as tid {tid}, the report has no such thread (tids {tids:?})"));
        }
        t
    }

    /// `ROLE (tid N)`, for messages.
    fn who(&self, role: &str) -> String {
        format!("{role} (tid {})", self.case.side.tid(role))
    }

    /// The entry of `waits` on `addr`, which must exist and have `kind`.
    fn wait_on(&mut self, role: &str, t: &Value, obj: &str, addr: u64, kind: &str) -> Option<Wait> {
        let w = waits(t).into_iter().find(|w| w.object == addr);
        match &w {
            None => self.fail(format!(
                "{}: no entry in waits for {kind} {obj} ({addr:#x}); waits: {}",
                self.who(role),
                shown(t.get("waits"))
            )),
            Some(w) if w.kind != kind => self.fail(format!(
                "{}: waits on {obj} ({addr:#x}) has kind {:?}, want {kind:?}",
                self.who(role),
                w.kind
            )),
            Some(_) => {}
        }
        w
    }

    /// `role` made no call on `addr` that waits: an entry, if any, has count 0 and no time.
    fn no_wait(&mut self, role: &str, t: &Value, obj: &str, addr: u64, why: &str) {
        if let Some(w) = waits(t).into_iter().find(|w| w.object == addr) {
            if w.count != 0 || w.wait_ns > MS || w.contended != 0 {
                self.fail(format!("{}: {obj} ({addr:#x}): want no wait ({why}), the report has {w:?}", self.who(role)));
            }
        }
    }

    fn eq(&mut self, what: String, got: u64, want: u64, why: &str) {
        if got != want {
            self.fail(format!("{what} is {got}, want {want} ({why})"));
        }
    }

    /// `got` ns at least `min` ns.
    fn at_least(&mut self, what: String, got: Option<u64>, min: u64, why: &str) {
        match got {
            Some(g) if g >= min => {}
            Some(g) => self.fail(format!("{what} is {}, want >= {} ({why})", ms(g), ms(min))),
            None => self.fail(format!("{what} is missing ({why})")),
        }
    }

    /// A count at least `min`.
    fn count_at_least(&mut self, what: String, got: u64, min: u64, why: &str) {
        if got < min {
            self.fail(format!("{what} is {got}, want >= {min} ({why})"));
        }
    }

    /// `got` ns at most `max` ns.
    fn at_most(&mut self, what: String, got: Option<u64>, max: u64, why: &str) {
        if let Some(g) = got {
            if g > max {
                self.fail(format!("{what} is {}, want <= {} ({why})", ms(g), ms(max)));
            }
        }
    }

    /// A sum of wait times over `calls` calls against the program's sum around the same
    /// calls: profile <= program + max(3 ms, 5 %), profile >= program - max(3 ms, 5 %) - 5 µs
    /// per call.
    fn near_sum(&mut self, what: String, got: Option<u64>, program: u64, calls: u64) {
        let Some(g) = got else {
            self.fail(format!("{what} is missing"));
            return;
        };
        let tol = (3 * MS).max(program / 20);
        let (lo, hi) = (program.saturating_sub(tol + calls * 5_000), program + tol);
        if g < lo || g > hi {
            self.fail(format!(
                "{what} is {}, the program measured {} around the same {calls} calls; want within [{}, {}] \
                 (program - max(3 ms, 5 %) - 5 µs per call, program + max(3 ms, 5 %))",
                ms(g),
                ms(program),
                ms(lo),
                ms(hi)
            ));
        }
    }

    /// Calls of the wrapped function `func` in `role`'s thread must be `n`.
    fn calls(&mut self, role: &str, t: &Value, func: &str, n: u64) {
        let got = calls_named(t, func);
        if got != n {
            self.fail(format!(
                "{}: {func} called {got} times, want {n} (functions[] entry named {func})",
                self.who(role)
            ));
        }
    }

    /// A string field of a thread.
    fn str_eq(&mut self, role: &str, t: &Value, key: &str, want: Option<&str>) {
        let got = t.get(key);
        let ok = match want {
            Some(w) => got.and_then(Value::as_str) == Some(w),
            None => got.is_some_and(Value::is_null),
        };
        if !ok {
            let want = want.map(|w| format!("{w:?}")).unwrap_or_else(|| "null".into());
            self.fail(format!("{}: {key} is {}, want {want}", self.who(role), shown(got)));
        }
    }

    /// An integer field of a thread.
    fn u64_eq(&mut self, role: &str, t: &Value, key: &str, want: u64) {
        let got = t.get(key);
        if got.and_then(Value::as_u64) != Some(want) {
            self.fail(format!("{}: {key} is {}, want {want}", self.who(role), shown(got)));
        }
    }

    /// The thread record of a thread that the program created and joined: start routine,
    /// creator, name, exit and exit value, state, and a known end.
    #[allow(clippy::too_many_arguments)]
    fn ended_thread(
        &mut self,
        role: &str,
        t: &Value,
        start_routine: &str,
        creator: &str,
        name: &str,
        exit: &str,
        value: Option<u64>,
    ) {
        self.str_eq(role, t, "start_routine", Some(start_routine));
        let creator_tid = self.case.side.tid(creator);
        self.u64_eq(role, t, "creator_tid", creator_tid);
        self.str_eq(role, t, "name", Some(name));
        self.str_eq(role, t, "exit", Some(exit));
        if let Some(v) = value {
            self.u64_eq(role, t, "exit_value", v);
        }
        self.str_eq(role, t, "state", Some("EXITED"));
        if !t.get("end_ns").is_some_and(Value::is_u64) {
            self.fail(format!(
                "{}: end_ns is {}, want ns (the thread was joined)",
                self.who(role),
                shown(t.get("end_ns"))
            ));
        }
    }

    /// The entry of `objects` for `addr`: its kind, and (if given) the function and the
    /// thread that first used it.
    fn object(&mut self, obj: &str, addr: u64, kind: &str, first: Option<(&str, &str)>) {
        let os = self.case.report.get("objects").and_then(Value::as_array).map(Vec::as_slice).unwrap_or(&[]);
        let at: Vec<&Value> = os
            .iter()
            .filter(|o| o.get("address").and_then(Value::as_str).and_then(hex_address) == Some(addr))
            .collect();
        let o = match at[..] {
            [o] => o,
            [] => return self.fail(format!("objects[]: no entry for {kind} {obj} ({addr:#x})")),
            _ => {
                let all: Vec<String> = at.iter().map(|o| o.to_string()).collect();
                return self.fail(format!(
                    "objects[]: {} entries for {obj} ({addr:#x}), which the program uses as one {kind} only: {all:?}",
                    at.len()
                ));
            }
        };
        if o.get("kind").and_then(Value::as_str) != Some(kind) {
            self.fail(format!("objects[]: {obj} ({addr:#x}): kind is {}, want {kind:?}", shown(o.get("kind"))));
        }
        if let Some((func, role)) = first {
            if o.get("first_used_in").and_then(Value::as_str) != Some(func) {
                self.fail(format!(
                    "objects[]: {obj} ({addr:#x}): first_used_in is {}, want {func:?} (the program makes the first call on it there)",
                    shown(o.get("first_used_in"))
                ));
            }
            let tid = self.case.side.tid(role);
            if o.get("first_tid").and_then(Value::as_u64) != Some(tid) {
                self.fail(format!(
                    "objects[]: {obj} ({addr:#x}): first_tid is {}, want {tid} ({role})",
                    shown(o.get("first_tid"))
                ));
            }
        }
    }

    fn finish(self) -> Findings {
        self.found
    }
}

/// The test of check `section` of `program` (a check function) on `case`; `listed` are
/// the checks the tests name for it.
fn section_check(case: &Case, program: fn(&Case) -> Findings, section: &str, listed: &[&str]) {
    let found = program(case);
    found.verdict(&case.ctx, section, listed, || {
        format!(
            "profile {}\n--- side file of the measured run ---\n{}\n--- report ---\n{}",
            case.profile.display(),
            excerpt(case.side.text.as_bytes(), 3000),
            excerpt(serde_json::to_string_pretty(&case.report).unwrap_or_default().as_bytes(), 16000),
        )
    });
}

// ---------------------------------------------------------------------------------------
// The checks of each program
// ---------------------------------------------------------------------------------------

/// locks_mutex.c: the holder keeps m for 200 ms, the waiter blocks on it.
fn check_mutex_hold(case: &Case) -> Findings {
    let mut c = Checker::new(case);
    let side = &case.side;
    let m = side.num(&["obj", "m"]);
    let (prog_wait, prog_hold) = (side.num(&["wait", "waiter", "m"]), side.num(&["hold", "holder", "m"]));
    c.section("threads_found");
    let (Some(main), Some(holder), Some(waiter)) = (c.thread("main"), c.thread("holder"), c.thread("waiter")) else {
        return c.finish();
    };
    c.section("waiter_wait");
    if let Some(w) = c.wait_on("waiter", waiter, "m", m, "mutex") {
        let who = c.who("waiter");
        c.eq(format!("{who}: count on m"), w.count, 1, "it locks m once");
        c.eq(format!("{who}: contended on m"), w.contended, 1, "its one lock found m locked by the holder");
        c.at_least(format!("{who}: wait_ns on m"), Some(w.wait_ns), 150 * MS, "the holder keeps m 200 ms");
        c.at_most(
            format!("{who}: wait_ns on m"),
            Some(w.wait_ns),
            prog_wait + 20 * MS,
            &format!("the program measured {} around the call; + 20 ms", ms(prog_wait)),
        );
        c.at_most(format!("{who}: hold_ns on m"), Some(w.hold_ns), 20 * MS, "it unlocks right after locking");
    }
    c.section("holder_hold");
    if let Some(w) = c.wait_on("holder", holder, "m", m, "mutex") {
        let who = c.who("holder");
        c.eq(format!("{who}: count on m"), w.count, 1, "it locks m once");
        c.eq(format!("{who}: contended on m"), w.contended, 0, "nobody holds m when it locks it");
        c.at_most(format!("{who}: wait_ns on m"), Some(w.wait_ns), 20 * MS, "m is free; the wait is the waiter's");
        c.at_least(format!("{who}: hold_ns on m"), Some(w.hold_ns), 190 * MS, "it sleeps 200 ms holding m");
        c.at_most(
            format!("{who}: hold_ns on m"),
            Some(w.hold_ns),
            prog_hold + 20 * MS,
            &format!("the program measured {} from lock to unlock; + 20 ms", ms(prog_hold)),
        );
    }
    c.section("main_no_wait");
    c.no_wait("main", main, "m", m, "main never touches m");
    c.section("states");
    let who = c.who("waiter");
    c.at_least(
        format!("{who}: states.BLOCKED_MUTEX"),
        state_ns(waiter, "BLOCKED_MUTEX"),
        150 * MS,
        "blocked on m ~200 ms",
    );
    let who = c.who("holder");
    c.at_most(format!("{who}: states.BLOCKED_MUTEX"), state_ns(holder, "BLOCKED_MUTEX"), 20 * MS, "never blocks on m");
    c.section("worker_threads");
    for role in ["holder", "waiter"] {
        let t = if role == "holder" { holder } else { waiter };
        c.calls(role, t, "pthread_mutex_lock", 1);
        c.calls(role, t, "pthread_mutex_unlock", 1);
        c.ended_thread(role, t, role, "main", &case.p.name, "returned", Some(0));
    }
    c.section("main_thread");
    c.calls("main", main, "pthread_create", 2);
    c.calls("main", main, "pthread_join", 2);
    c.calls("main", main, "pthread_mutex_lock", 0);
    c.str_eq("main", main, "start_routine", None);
    c.str_eq("main", main, "name", Some(&case.p.name));
    let joins: Vec<Wait> = waits(main).into_iter().filter(|w| w.kind == "thread").collect();
    if joins.len() != 2 || joins.iter().any(|w| w.count != 1) {
        c.fail(format!("{}: want 2 waits of kind thread with count 1 (two joins), got {joins:?}", c.who("main")));
    }
    c.section("objects");
    c.object("m", m, "mutex", Some(("holder", "holder")));
    c.finish()
}

/// locks_mutex.c rewritten with lock_wait, lock_hold and state_trace off at start.
fn check_metrics_off(case: &Case) -> Findings {
    let mut c = Checker::new(case);
    for t in c.threads() {
        let tid = tid_of(t);
        c.section("no_waits");
        for w in waits(t) {
            if w.count != 0 || w.wait_ns != 0 || w.contended != 0 || w.hold_ns != 0 {
                c.fail(format!(
                    "thread {tid}: waits has {w:?}; want nothing recorded (lock_wait and lock_hold are off)"
                ));
            }
        }
        c.section("no_blocked_states");
        for st in STATES.iter().filter(|s| s.starts_with("BLOCKED_")) {
            if let Some(ns) = state_ns(t, st).filter(|ns| *ns > 0) {
                c.fail(format!(
                    "thread {tid}: states.{st} is {}; want 0 (lock_wait, which drives the states, is off)",
                    ms(ns)
                ));
            }
        }
    }
    // The calls metric is still on: the wrapped calls are still counted.
    c.section("calls_counted");
    if let (Some(holder), Some(waiter)) = (c.thread("holder"), c.thread("waiter")) {
        c.calls("holder", holder, "pthread_mutex_lock", 1);
        c.calls("waiter", waiter, "pthread_mutex_lock", 1);
    }
    c.finish()
}

/// locks_condvar.c: bounded queue, producer and consumer.
fn check_condvar_queue(case: &Case) -> Findings {
    const ITEMS: u64 = 20000;
    let mut c = Checker::new(case);
    let side = &case.side;
    let (q_lock, not_full, not_empty) =
        (side.num(&["obj", "q_lock"]), side.num(&["obj", "not_full"]), side.num(&["obj", "not_empty"]));
    c.section("threads_found");
    let (Some(main), Some(producer), Some(consumer)) = (c.thread("main"), c.thread("producer"), c.thread("consumer"))
    else {
        return c.finish();
    };
    for (role, t) in [("main", main), ("producer", producer), ("consumer", consumer)] {
        let locks = side.num(&["locks", role]);
        c.section("q_lock_waits");
        if let Some(w) = c.wait_on(role, t, "q_lock", q_lock, "mutex") {
            c.eq(
                format!("{}: count on q_lock", c.who(role)),
                w.count,
                locks,
                "its pthread_mutex_lock calls, counted by the program",
            );
        }
        c.section("calls");
        c.calls(role, t, "pthread_mutex_lock", locks);
        c.calls(role, t, "pthread_mutex_unlock", locks);
    }
    for (role, t, cv, name, other, other_name) in [
        ("producer", producer, not_full, "not_full", not_empty, "not_empty"),
        ("consumer", consumer, not_empty, "not_empty", not_full, "not_full"),
    ] {
        let v = side.nums(&["cwaits", role, name]);
        let (n, ns) = (v[0], v[1]);
        c.section("cond_waits");
        if let Some(w) = c.wait_on(role, t, name, cv, "condvar") {
            let who = c.who(role);
            c.eq(format!("{who}: count on {name}"), w.count, n, "its pthread_cond_wait calls, counted by the program");
            c.near_sum(format!("{who}: wait_ns on {name}"), Some(w.wait_ns), ns, n);
            c.eq(format!("{who}: hold_ns on {name}"), w.hold_ns, 0, "a condvar is not held");
        }
        c.section("calls");
        c.calls(role, t, "pthread_cond_wait", n);
        c.calls(role, t, "pthread_cond_signal", ITEMS);
        c.section("cond_waits");
        c.no_wait(role, t, other_name, other, "it only signals it");
        c.section("worker_threads");
        c.ended_thread(role, t, role, "main", &case.p.name, "returned", Some(0));
    }
    c.section("consumer_blocked");
    let n = side.nums(&["cwaits", "consumer", "not_empty"])[0];
    if n == 0 {
        c.fail("the consumer's side file counts no cond wait: its first consume_item must wait".into());
    }
    let who = c.who("consumer");
    let prog = side.nums(&["cwaits", "consumer", "not_empty"])[1];
    c.at_least(
        format!("{who}: states.BLOCKED_CONDVAR"),
        state_ns(consumer, "BLOCKED_CONDVAR"),
        1,
        "it waits on not_empty at least once",
    );
    c.near_sum(format!("{who}: states.BLOCKED_CONDVAR"), state_ns(consumer, "BLOCKED_CONDVAR"), prog, n);
    c.section("calls");
    c.calls("main", main, "pthread_cond_signal", 1);
    c.calls("main", main, "pthread_cond_wait", 0);
    c.section("objects");
    c.object("q_lock", q_lock, "mutex", Some(("queue_setup", "main")));
    c.object("not_full", not_full, "condvar", Some(("queue_setup", "main")));
    c.object("not_empty", not_empty, "condvar", Some(("consume_item", "consumer")));
    c.finish()
}

/// locks_rwlock.c: readers behind a 100 ms write lock.
fn check_rwlock(case: &Case) -> Findings {
    let mut c = Checker::new(case);
    let side = &case.side;
    let rw = side.num(&["obj", "rw"]);
    c.section("threads_found");
    let Some(writer) = c.thread("writer") else { return c.finish() };
    for k in 0..3 {
        let role = format!("reader{k}");
        c.section("threads_found");
        let Some(t) = c.thread(&role) else { continue };
        let who = c.who(&role);
        let prog = side.num(&["wait", &role, "rw"]);
        c.section("reader_waits");
        if let Some(w) = c.wait_on(&role, t, "rw", rw, "rwlock") {
            c.eq(format!("{who}: count on rw"), w.count, 201, "201 pthread_rwlock_rdlock calls");
            c.count_at_least(format!("{who}: contended on rw"), w.contended, 1, "its first rdlock blocks ~100 ms");
            c.at_least(format!("{who}: wait_ns on rw"), Some(w.wait_ns), 80 * MS, "the writer holds rw 100 ms");
            c.at_most(
                format!("{who}: wait_ns on rw"),
                Some(w.wait_ns),
                prog + 20 * MS,
                &format!("the program measured {} around the blocking call; + 20 ms for the 200 free ones", ms(prog)),
            );
        }
        c.section("states");
        c.at_least(format!("{who}: states.BLOCKED_RWLOCK"), state_ns(t, "BLOCKED_RWLOCK"), 80 * MS, "blocked ~100 ms");
        c.section("calls");
        c.calls(&role, t, "pthread_rwlock_rdlock", 201);
        c.calls(&role, t, "pthread_rwlock_wrlock", 0);
        c.calls(&role, t, "pthread_rwlock_unlock", 201);
        c.section("worker_threads");
        c.ended_thread(&role, t, "reader", "main", &case.p.name, "returned", Some(201));
    }
    let who = c.who("writer");
    let prog_hold = side.num(&["hold", "writer", "rw"]);
    c.section("writer_hold");
    if let Some(w) = c.wait_on("writer", writer, "rw", rw, "rwlock") {
        c.eq(format!("{who}: count on rw"), w.count, 51, "51 pthread_rwlock_wrlock calls");
        c.at_least(
            format!("{who}: hold_ns on rw"),
            Some(w.hold_ns),
            90 * MS,
            "it sleeps 100 ms holding the write lock",
        );
        c.at_most(
            format!("{who}: hold_ns on rw"),
            Some(w.hold_ns),
            prog_hold + 20 * MS,
            &format!("the program measured {} for the long hold; + 20 ms for 50 short ones", ms(prog_hold)),
        );
    }
    c.section("calls");
    c.calls("writer", writer, "pthread_rwlock_wrlock", 51);
    c.calls("writer", writer, "pthread_rwlock_unlock", 51);
    c.section("worker_threads");
    c.ended_thread("writer", writer, "writer", "main", &case.p.name, "returned", Some(0));
    c.section("objects");
    c.object("rw", rw, "rwlock", Some(("writer", "writer")));
    c.finish()
}

/// locks_sem.c: three stages, 500 tokens.
fn check_semaphores(case: &Case) -> Findings {
    const TOKENS: u64 = 500;
    let mut c = Checker::new(case);
    let side = &case.side;
    let s: Vec<u64> = (0..3).map(|k| side.num(&["obj", &format!("s{k}")])).collect();
    c.section("threads_found");
    let Some(main) = c.thread("main") else { return c.finish() };
    for k in 0..3 {
        let role = format!("stage{k}");
        c.section("threads_found");
        let Some(t) = c.thread(&role) else { continue };
        let who = c.who(&role);
        let v = side.nums(&["semwait", &role, &format!("s{k}")]);
        let (n, ns) = (v[0], v[1]);
        c.section("side_file_counts");
        c.eq(format!("side file: {role}'s sem_wait calls"), n, TOKENS, "the program's own count");
        c.section("sem_waits");
        if let Some(w) = c.wait_on(&role, t, &format!("s{k}"), s[k], "semaphore") {
            c.eq(format!("{who}: count on s{k}"), w.count, TOKENS, "500 successful sem_wait calls");
            c.near_sum(format!("{who}: wait_ns on s{k}"), Some(w.wait_ns), ns, n);
            c.eq(format!("{who}: hold_ns on s{k}"), w.hold_ns, 0, "a semaphore is not held");
        }
        if k < 2 {
            c.no_wait(&role, t, &format!("s{}", k + 1), s[k + 1], "it only posts it");
        }
        c.section("calls");
        c.calls(&role, t, "sem_wait", TOKENS);
        c.calls(&role, t, "sem_post", if k < 2 { TOKENS } else { 0 });
        c.section("states");
        c.near_sum(format!("{who}: states.BLOCKED_SEMAPHORE"), state_ns(t, "BLOCKED_SEMAPHORE"), ns, n);
        c.section("worker_threads");
        c.ended_thread(&role, t, "stage", "main", &case.p.name, "returned", Some(0));
    }
    c.section("states");
    let who = c.who("stage0");
    if let Some(t) = c.thread("stage0") {
        c.at_least(
            format!("{who}: states.BLOCKED_SEMAPHORE"),
            state_ns(t, "BLOCKED_SEMAPHORE"),
            1,
            "main posts only after 30 ms",
        );
    }
    for (k, &a) in s.iter().enumerate() {
        c.section("sem_waits");
        c.no_wait("main", main, &format!("s{k}"), a, "main only posts");
        c.section("objects");
        c.object(&format!("s{k}"), a, "semaphore", None);
    }
    c.section("calls");
    c.calls("main", main, "sem_post", TOKENS);
    c.calls("main", main, "sem_wait", 0);
    c.finish()
}

/// locks_join.c: names, start routines, creators, exits and joins.
fn check_joins(case: &Case) -> Findings {
    let mut c = Checker::new(case);
    let side = &case.side;
    c.section("threads_found");
    let Some(main) = c.thread("main") else { return c.finish() };
    // (role, start routine, creator, name, exit, value)
    let expected = [
        ("alpha", "alpha_main", "main", "alpha-w", "returned", 11),
        ("beta", "beta_main", "main", "beta-w", "returned", 22),
        ("gamma", "gamma_main", "main", "gamma-w", "pthread_exit", 33),
        ("delta", "delta_main", "main", "delta-self", "returned", 44),
        ("child", "beta_child_main", "beta", "beta-w", "returned", 55),
    ];
    let mut found: BTreeMap<&str, &Value> = BTreeMap::new();
    for (role, routine, creator, name, exit, value) in expected {
        c.section("threads_found");
        let Some(t) = c.thread(role) else { continue };
        found.insert(role, t);
        c.section("thread_records");
        c.ended_thread(role, t, routine, creator, name, exit, Some(value));
        c.section("lifetimes");
        let (start, end) = (t.get("start_ns").and_then(Value::as_u64), t.get("end_ns").and_then(Value::as_u64));
        if let (Some(s), Some(e)) = (start, end) {
            c.at_least(
                format!("{}: end_ns - start_ns", c.who(role)),
                Some(e.saturating_sub(s)),
                19 * MS,
                "it sleeps 20 ms",
            );
        }
    }
    c.section("lifetimes");
    if let (Some(beta), Some(child)) = (found.get("beta"), found.get("child")) {
        let g = |t: &Value, k: &str| t.get(k).and_then(Value::as_u64);
        if let (Some(bs), Some(cs)) = (g(beta, "start_ns"), g(child, "start_ns")) {
            if cs < bs {
                c.fail(format!("child's start_ns {cs} < beta's {bs}, but beta created it"));
            }
        }
        if let (Some(be), Some(ce)) = (g(beta, "end_ns"), g(child, "end_ns")) {
            if ce > be {
                c.fail(format!("child's end_ns {ce} > beta's {be}, but beta joined it before ending"));
            }
        }
    }
    c.section("thread_records");
    c.str_eq("main", main, "start_routine", None);
    c.str_eq("main", main, "name", Some(&case.p.name));
    // Joins: main waits for alpha..delta, beta for its child.
    let mut main_join_ns = 0;
    for (waiter, target) in
        [("main", "alpha"), ("main", "beta"), ("main", "gamma"), ("main", "delta"), ("beta", "child")]
    {
        let Some(wt) = (if waiter == "main" { Some(main) } else { found.get("beta").copied() }) else { continue };
        let handle = side.num(&["handle", target]);
        let prog = side.num(&["join", waiter, target]);
        if waiter == "main" {
            main_join_ns += prog;
        }
        c.section("join_waits");
        if let Some(w) = c.wait_on(waiter, wt, &format!("the thread {target}"), handle, "thread") {
            let who = c.who(waiter);
            c.eq(format!("{who}: count on the thread {target}"), w.count, 1, "one join");
            c.near_sum(format!("{who}: wait_ns on the thread {target}"), Some(w.wait_ns), prog, 1);
            if target == "alpha" || target == "child" {
                c.eq(format!("{who}: contended on the thread {target}"), w.contended, 1, "the join blocks ~20 ms");
            }
        }
        let first = if waiter == "main" { ("main", "main") } else { ("beta_main", "beta") };
        c.section("objects");
        c.object(&format!("the thread {target}"), handle, "thread", Some(first));
    }
    c.section("states");
    let who = c.who("main");
    c.at_least(format!("{who}: states.BLOCKED_JOIN"), state_ns(main, "BLOCKED_JOIN"), 1, "its first join waits ~20 ms");
    c.near_sum(format!("{who}: states.BLOCKED_JOIN"), state_ns(main, "BLOCKED_JOIN"), main_join_ns, 4);
    c.section("calls");
    c.calls("main", main, "pthread_create", 4);
    c.calls("main", main, "pthread_setname_np", 3);
    c.calls("main", main, "pthread_join", 3);
    c.calls("main", main, "pthread_timedjoin_np", 1);
    if let Some(t) = found.get("delta") {
        c.calls("delta", t, "pthread_setname_np", 1);
    }
    if let Some(t) = found.get("beta") {
        c.calls("beta", t, "pthread_create", 1);
        c.calls("beta", t, "pthread_join", 1);
    }
    if let Some(t) = found.get("gamma") {
        c.calls("gamma", t, "pthread_exit", 1);
    }
    c.finish()
}

/// locks_barrier.c: 4 racers × 100 rounds.
fn check_barrier(case: &Case) -> Findings {
    const ROUNDS: u64 = 100;
    let mut c = Checker::new(case);
    let side = &case.side;
    let b = side.num(&["obj", "b"]);
    for k in 0..4 {
        let role = format!("racer{k}");
        c.section("threads_found");
        let Some(t) = c.thread(&role) else { continue };
        let who = c.who(&role);
        let v = side.nums(&["bwait", &role, "b"]);
        let (n, ns) = (v[0], v[1]);
        c.section("barrier_waits");
        if let Some(w) = c.wait_on(&role, t, "b", b, "barrier") {
            c.eq(format!("{who}: count on b"), w.count, ROUNDS, "one pthread_barrier_wait per round");
            c.near_sum(format!("{who}: wait_ns on b"), Some(w.wait_ns), ns, n);
            if k > 0 {
                c.count_at_least(
                    format!("{who}: contended on b"),
                    w.contended,
                    ROUNDS / 2,
                    "racer0 arrives ~1 ms late each round",
                );
            }
            if w.contended > w.count {
                c.fail(format!("{who}: contended {} > count {} on b", w.contended, w.count));
            }
        }
        c.section("calls");
        c.calls(&role, t, "pthread_barrier_wait", ROUNDS);
        c.section("states");
        c.near_sum(format!("{who}: states.BLOCKED_BARRIER"), state_ns(t, "BLOCKED_BARRIER"), ns, n);
        if k > 0 {
            c.at_least(
                format!("{who}: states.BLOCKED_BARRIER"),
                state_ns(t, "BLOCKED_BARRIER"),
                50 * MS,
                "~1 ms per round behind racer0",
            );
        }
        c.section("worker_threads");
        c.ended_thread(&role, t, "racer", "main", &case.p.name, "returned", Some(0));
    }
    c.section("objects");
    c.object("b", b, "barrier", None);
    c.finish()
}

/// locks_cancel.c / locks_cancelpp.cpp: a thread cancelled in pthread_cond_wait.
fn check_cancel(case: &Case) -> Findings {
    let mut c = Checker::new(case);
    let side = &case.side;
    let (m, cv, handle) = (side.num(&["obj", "m"]), side.num(&["obj", "c"]), side.num(&["handle", "sleeper"]));
    c.section("threads_found");
    let (Some(main), Some(sleeper)) = (c.thread("main"), c.thread("sleeper")) else { return c.finish() };
    c.section("canceled_thread");
    c.ended_thread("sleeper", sleeper, "sleeper", "main", &case.p.name, "canceled", None);
    c.section("mutex_wait");
    if let Some(w) = c.wait_on("sleeper", sleeper, "m", m, "mutex") {
        c.eq(
            format!("{}: count on m", c.who("sleeper")),
            w.count,
            1,
            "it locks m once (pthread_cond_wait takes it back inside glibc)",
        );
    }
    c.section("no_cond_wait");
    c.no_wait("sleeper", sleeper, "c", cv, "its only pthread_cond_wait never returned");
    c.section("calls");
    c.calls("sleeper", sleeper, "pthread_cond_wait", 1);
    c.calls("sleeper", sleeper, "pthread_mutex_lock", 1);
    c.section("join_wait");
    if let Some(w) = c.wait_on("main", main, "the thread sleeper", handle, "thread") {
        c.eq(format!("{}: count on the thread sleeper", c.who("main")), w.count, 1, "one join");
    }
    c.section("calls");
    c.calls("main", main, "pthread_join", 1);
    c.calls("main", main, "pthread_mutex_lock", 2);
    c.section("objects");
    c.object("m", m, "mutex", Some(("sleeper", "sleeper")));
    c.object("c", cv, "condvar", Some(("sleeper", "sleeper")));
    c.finish()
}

/// locks_counts.c: exact numbers of calls.
fn check_counts(case: &Case) -> Findings {
    let mut c = Checker::new(case);
    let side = &case.side;
    let shared = side.num(&["obj", "shared"]);
    let privs: Vec<u64> = (1..=3).map(|k| side.num(&["obj", &format!("priv{k}")])).collect();
    c.section("threads_found");
    let Some(main) = c.thread("main") else { return c.finish() };
    for k in 1..=3u64 {
        let role = format!("worker{k}");
        c.section("threads_found");
        let Some(t) = c.thread(&role) else { continue };
        let who = c.who(&role);
        c.section("worker_calls");
        c.calls(&role, t, "pthread_mutex_lock", k * 1000 + 200);
        c.calls(&role, t, "pthread_mutex_trylock", k * 150);
        c.calls(&role, t, "pthread_mutex_timedlock", k * 100);
        c.calls(&role, t, "pthread_mutex_unlock", k * 1150 + 200);
        c.section("private_mutex_waits");
        if let Some(w) = c.wait_on(&role, t, &format!("priv{k}"), privs[k as usize - 1], "mutex") {
            c.eq(
                format!("{who}: count on priv{k}"),
                w.count,
                k * 1150,
                "k*1000 locks + k*50 trylocks + k*100 timedlocks",
            );
            c.eq(
                format!("{who}: contended on priv{k}"),
                w.contended,
                k * 100,
                "its k*100 EBUSY trylocks; no other thread uses priv[k]",
            );
        }
        c.section("shared_mutex_waits");
        if let Some(w) = c.wait_on(&role, t, "shared", shared, "mutex") {
            c.eq(format!("{who}: count on shared"), w.count, 200, "200 locks");
        }
        c.section("private_mutex_waits");
        for (j, &a) in privs.iter().enumerate() {
            if j as u64 + 1 != k {
                c.no_wait(&role, t, &format!("priv{}", j + 1), a, "it never touches another worker's mutex");
            }
        }
        c.section("worker_threads");
        c.ended_thread(&role, t, "worker", "main", &case.p.name, "returned", Some(0));
        c.section("objects");
        c.object(&format!("priv{k}"), privs[k as usize - 1], "mutex", Some(("worker", role.as_str())));
    }
    c.section("main_thread");
    for f in ["pthread_mutex_lock", "pthread_mutex_trylock", "pthread_mutex_timedlock", "pthread_mutex_unlock"] {
        c.calls("main", main, f, 0);
    }
    c.calls("main", main, "pthread_create", 3);
    c.calls("main", main, "pthread_join", 3);
    c.str_eq("main", main, "name", Some(&case.p.name));
    let mutex_waits: Vec<Wait> = waits(main).into_iter().filter(|w| w.kind == "mutex").collect();
    if !mutex_waits.is_empty() {
        c.fail(format!("{}: waits on mutexes {mutex_waits:?}, but main locks none", c.who("main")));
    }
    c.section("objects");
    c.object("shared", shared, "mutex", None);
    let os = case.report.get("objects").and_then(Value::as_array).map(Vec::as_slice).unwrap_or(&[]);
    if let Some(o) = os.iter().find(|o| o.get("address").and_then(Value::as_str).and_then(hex_address) == Some(shared))
    {
        if o.get("first_used_in").and_then(Value::as_str) != Some("worker") {
            c.fail(format!("objects[]: shared: first_used_in is {}, want \"worker\"", shown(o.get("first_used_in"))));
        }
    }
    c.finish()
}

/// The mutexes of locks_kinds.c: (name, count, contended) of main's waits on each.
const KIND_WAITS: [(&str, u64, u64); 5] =
    [("normal", 1155, 0), ("errorcheck", 1160, 10), ("recursive", 1170, 10), ("robust", 1150, 1), ("pi", 1150, 0)];

/// main's calls of each mutex function in locks_kinds.c.
const KIND_CALLS: [(&str, u64); 4] = [
    ("pthread_mutex_lock", 5046),
    ("pthread_mutex_timedlock", 500),
    ("pthread_mutex_trylock", 250),
    ("pthread_mutex_unlock", 5786),
];

/// locks_kinds.c with the lock metrics on: the default spec (`state_trace` off at start),
/// whose uncontended mutex locks and unlocks take the fast path, or with `state_trace` on,
/// which keeps every call on the full path: the same exact counts either way.
fn check_kinds(case: &Case) -> Findings {
    let mut c = Checker::new(case);
    let side = &case.side;
    c.section("threads_found");
    let (Some(main), Some(dier)) = (c.thread("main"), c.thread("dier")) else { return c.finish() };
    c.section("calls");
    for (f, n) in KIND_CALLS {
        c.calls("main", main, f, n);
    }
    c.calls("dier", dier, "pthread_mutex_lock", 1);
    c.calls("dier", dier, "pthread_mutex_unlock", 0);
    let who = c.who("main");
    for (name, count, contended) in KIND_WAITS {
        let addr = side.num(&["obj", name]);
        c.section("kind_waits");
        if let Some(w) = c.wait_on("main", main, name, addr, "mutex") {
            c.eq(format!("{who}: count on {name}"), w.count, count, "see locks_kinds.c");
            c.eq(format!("{who}: contended on {name}"), w.contended, contended, "see locks_kinds.c");
            c.section("kind_holds");
            if w.hold_ns == 0 {
                c.fail(format!("{who}: {name}: hold_ns is 0 after {count} acquisitions, each released"));
            }
        }
    }
    c.section("kind_waits");
    let robust = side.num(&["obj", "robust"]);
    if let Some(w) = c.wait_on("dier", dier, "robust", robust, "mutex") {
        c.eq(format!("{}: count on robust", c.who("dier")), w.count, 1, "one lock, never released");
    }
    c.section("kind_holds");
    let normal = side.num(&["obj", "normal"]);
    let program = side.num(&["hold", "normal"]);
    if let Some(w) = c.wait_on("main", main, "normal", normal, "mutex") {
        let slack = (program / 20).max(MS / 2);
        c.at_least(
            format!("{who}: hold_ns on normal"),
            Some(w.hold_ns),
            program.saturating_sub(slack),
            "five 2 ms holds, measured inside the lock's hold by main",
        );
        c.at_most(
            format!("{who}: hold_ns on normal"),
            Some(w.hold_ns),
            program + (program / 20).max(3 * MS),
            "the five 2 ms holds and 1150 short ones",
        );
    }
    c.finish()
}

/// locks_kinds.c with calls on and the lock metrics off: the thunks count every call,
/// nothing else is recorded.
fn check_kinds_calls(case: &Case) -> Findings {
    let mut c = Checker::new(case);
    c.section("threads_found");
    let (Some(main), Some(dier)) = (c.thread("main"), c.thread("dier")) else { return c.finish() };
    c.section("calls");
    for (f, n) in KIND_CALLS {
        c.calls("main", main, f, n);
    }
    c.calls("dier", dier, "pthread_mutex_lock", 1);
    c.section("no_waits");
    for (role, t) in [("main", main), ("dier", dier)] {
        let ws = waits(t);
        if !ws.is_empty() {
            c.fail(format!("{}: waits {ws:?}; want none (lock_wait and lock_hold are off)", c.who(role)));
        }
    }
    c.finish()
}

// ---------------------------------------------------------------------------------------
// A real program: pigz
// ---------------------------------------------------------------------------------------

/// About 4 MB of deterministic text: numbered lines of pseudo-random lowercase words.
fn pigz_input(dir: &Path) -> PathBuf {
    let path = dir.join("input.txt");
    let mut x: u32 = 12345;
    let mut s = String::with_capacity(4 << 20);
    let mut n = 0u32;
    while s.len() < 4 << 20 {
        n += 1;
        s += &format!("{n:07}");
        for _ in 0..10 {
            s.push(' ');
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            for i in 0..(3 + x % 6) {
                s.push((b'a' + ((x >> (i * 3)) % 20) as u8) as char);
            }
        }
        s.push('\n');
    }
    std::fs::write(&path, s).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    path
}

fn check_pigz() {
    let pigz = Path::new("/usr/bin/pigz");
    if !pigz.is_file() {
        if under_ci() {
            panic!("/usr/bin/pigz: missing under CI; .ci/run must `apt-get install pigz`");
        }
        eprintln!("\n!!!!!!!!!! SKIPPED: /usr/bin/pigz is not installed (apt-get install pigz); this test checks nothing here !!!!!!!!!!\n");
        return;
    }
    let _turn = cpu_turn();
    let dir = fresh_dir("locks-pigz");
    let input = pigz_input(&dir);
    let out = dir.join("rewritten").join("pigz");
    rewrite(pigz, &out);
    let profiles = dir.join("profiles");
    std::fs::create_dir_all(&profiles).unwrap_or_else(|e| panic!("{}: {e}", profiles.display()));
    let cwd = dir.join("cwd");
    std::fs::create_dir_all(&cwd).unwrap_or_else(|e| panic!("{}: {e}", cwd.display()));
    let args = ["-p", "2", "-c", path_str(&input)];
    let original = Run::new(pigz, &cwd).args(args).timeout(RUN_TIMEOUT).run();
    assert!(original.status == 0, "pigz {}: the original failed: {original:?}", args.join(" "));
    let measured = Run::new(&out, &cwd)
        .args(args)
        .env(stint_layout::ENV_PROFILE, &profile_template(&profiles, "pigz"))
        .timeout(RUN_TIMEOUT)
        .run();
    assert!(
        original.same_behaviour(&measured),
        "pigz {}: the rewritten program behaves differently\n{}",
        args.join(" "),
        describe_difference("original", &original, "rewritten", &measured)
    );
    let back = Run::new(pigz, &cwd).args(["-d", "-c"]).stdin(measured.stdout.clone()).timeout(RUN_TIMEOUT).run();
    let text = std::fs::read(&input).unwrap_or_else(|e| panic!("{}: {e}", input.display()));
    assert!(
        back.status == 0 && back.stdout == text,
        "pigz -d of the rewritten program's output does not give the input back: {back:?}"
    );

    let file = profiles.join(format!("pigz.{}.stint", measured.pid));
    let files = dir_entries(&profiles);
    assert!(files.len() == 1 && file.is_file(), "pigz: profiles {files:?}, want just {}", file.display());
    let report = report_json(&file);
    let mut bad: Vec<String> = report_invariants(&report, "pigz", measured.pid, false);
    bad.extend(lock_invariants(&report));
    let ts = threads(&report);
    if ts.len() < 3 {
        bad.push(format!("{} threads, want at least 3 (main, the writer, 2 compressors)", ts.len()));
    }
    let os = report.get("objects").and_then(Value::as_array).map(Vec::as_slice).unwrap_or(&[]);
    for kind in ["mutex", "condvar", "thread"] {
        if !os.iter().any(|o| o.get("kind").and_then(Value::as_str) == Some(kind)) {
            bad.push(format!("objects[] has no {kind}; pigz's yarn layer locks, waits and joins through pthreads"));
        }
    }
    for kind in ["mutex", "condvar"] {
        if !ts.iter().any(|t| waits(t).iter().any(|w| w.kind == kind && w.count > 0)) {
            bad.push(format!("no thread has a {kind} wait with count > 0"));
        }
    }
    if !ts
        .iter()
        .filter(|t| t.get("main").and_then(Value::as_bool) != Some(true))
        .all(|t| t.get("start_routine").is_some_and(Value::is_string))
    {
        bad.push(
            "a thread other than main has no start_routine; pigz creates all of its threads with pthread_create".into(),
        );
    }
    let main_tid = measured.pid as u64;
    if !ts.iter().any(|t| t.get("creator_tid").and_then(Value::as_u64) == Some(main_tid)) {
        bad.push(format!("no thread has creator_tid {main_tid} (main)"));
    }
    for by in ["lock", "thread"] {
        let o = stint(&["report", path_str(&file), "--by", by]);
        eprintln!(
            "--- stint report pigz.{}.stint --by {by} (exit {}) ---\n{}{}",
            measured.pid,
            o.status,
            o.stdout_str(),
            o.stderr_str()
        );
        if o.status != 0 || o.stdout.is_empty() {
            bad.push(format!(
                "stint report --by {by}: exit {}, {} bytes of output; want a table",
                o.status,
                o.stdout.len()
            ));
        }
    }
    let summary: Vec<String> = ts
        .iter()
        .map(|t| {
            let ws = waits(t);
            format!(
                "tid {} {} start_routine {} waits {} (count {}, wait {})",
                tid_of(t),
                shown(t.get("name")),
                shown(t.get("start_routine")),
                ws.len(),
                ws.iter().map(|w| w.count).sum::<u64>(),
                ms(ws.iter().map(|w| w.wait_ns).sum::<u64>())
            )
        })
        .collect();
    eprintln!("pigz -p 2: {} objects; threads:\n  {}", os.len(), summary.join("\n  "));
    assert!(
        bad.is_empty(),
        "pigz: {} check(s) failed:\n  - {}\n--- report ---\n{}",
        bad.len(),
        bad.join("\n  - "),
        excerpt(serde_json::to_string_pretty(&report).unwrap_or_default().as_bytes(), 16000)
    );
}

// ---------------------------------------------------------------------------------------
// The tests
// ---------------------------------------------------------------------------------------

/// One module per (program, mode) and in it one per variant, holding one `#[test]` per
/// check: the checks on the runs (`RUN_CHECKS`), the generic ones on the report
/// (`report_invariants`, `lock_invariants`, `threads_directive`) and the program's own,
/// which are the sections of its check function. `LISTED` names every (program, variant).
macro_rules! lock_tests {
    ($($mode:ident: $prog:literal $spec:ident => $check:ident [$($v:ident: $vname:literal),*] $checks:tt;)*) => {
        $(
            mod $mode {
                use super::*;
                lock_tests!(@variants $prog $spec $check [$($v $vname),*] $checks);
            }
        )*
        /// (program, variant) of every case above.
        const LISTED: &[(&str, &str)] = &[$($(($prog, $vname)),*),*];
    };
    (@variants $prog:literal $spec:ident $check:ident [$($v:ident $vname:literal),*] $checks:tt) => {
        $(
            mod $v {
                use super::*;
                lock_tests!(@checks $prog $vname $spec $check $checks);
            }
        )*
    };
    (@checks $prog:literal $vname:literal $spec:ident $check:ident [$($name:ident),*]) => {
        /// The checks of the report: the generic ones, then the program's.
        const CHECKS: &[&str] = &["report_invariants", "lock_invariants", "threads_directive", $(stringify!($name)),*];
        fn this_case() -> Arc<Case> {
            case($prog, $vname, SpecChoice::$spec)
        }
        #[test]
        fn exit_status() {
            run_check(&this_case(), "exit_status");
        }
        #[test]
        fn same_output() {
            run_check(&this_case(), "same_output");
        }
        #[test]
        fn same_output_off() {
            run_check(&this_case(), "same_output_off");
        }
        #[test]
        fn no_files_left() {
            run_check(&this_case(), "no_files_left");
        }
        #[test]
        fn side_files_agree() {
            run_check(&this_case(), "side_files_agree");
        }
        #[test]
        fn report_invariants() {
            section_check(&this_case(), $check, "report_invariants", CHECKS);
        }
        #[test]
        fn lock_invariants() {
            section_check(&this_case(), $check, "lock_invariants", CHECKS);
        }
        #[test]
        fn threads_directive() {
            section_check(&this_case(), $check, "threads_directive", CHECKS);
        }
        $(
            #[test]
            fn $name() {
                section_check(&this_case(), $check, stringify!($name), CHECKS);
            }
        )*
    };
}

lock_tests! {
    mutex_hold: "locks_mutex" Default => check_mutex_hold [pie_o2: "pie-O2", nopie_o0: "nopie-O0"]
        [threads_found, waiter_wait, holder_hold, main_no_wait, states, worker_threads, main_thread, objects];
    lock_metrics_off_at_start: "locks_mutex" LocksOff => check_metrics_off [pie_o2: "pie-O2"]
        [no_waits, no_blocked_states, calls_counted];
    condvar_queue: "locks_condvar" Default => check_condvar_queue [pie_o2: "pie-O2", nopie_o0: "nopie-O0"]
        [threads_found, q_lock_waits, calls, cond_waits, worker_threads, consumer_blocked, objects];
    rwlock_writer: "locks_rwlock" Default => check_rwlock [pie_o2: "pie-O2", nopie_o0: "nopie-O0"]
        [threads_found, reader_waits, states, calls, worker_threads, writer_hold, objects];
    semaphore_pipeline: "locks_sem" Default => check_semaphores [pie_o2: "pie-O2", nopie_o0: "nopie-O0"]
        [threads_found, side_file_counts, sem_waits, calls, states, worker_threads, objects];
    joins_and_names: "locks_join" Default => check_joins [pie_o2: "pie-O2", nopie_o0: "nopie-O0"]
        [threads_found, thread_records, lifetimes, join_waits, objects, states, calls];
    barrier_rounds: "locks_barrier" Default => check_barrier [pie_o2: "pie-O2", nopie_o0: "nopie-O0"]
        [threads_found, barrier_waits, calls, states, worker_threads, objects];
    cancel_cleanup: "locks_cancel" Default => check_cancel [pie_o2: "pie-O2", nopie_o0: "nopie-O0"]
        [threads_found, canceled_thread, mutex_wait, no_cond_wait, calls, join_wait, objects];
    cancel_destructor: "locks_cancelpp" Default => check_cancel [pie_o2: "pie-O2", nopie_o0: "nopie-O0"]
        [threads_found, canceled_thread, mutex_wait, no_cond_wait, calls, join_wait, objects];
    mutex_call_counts: "locks_counts" Default => check_counts [pie_o2: "pie-O2", nopie_o0: "nopie-O0"]
        [threads_found, worker_calls, private_mutex_waits, shared_mutex_waits, worker_threads, objects, main_thread];
    mutex_kinds: "locks_kinds" Default => check_kinds [pie_o2: "pie-O2", nopie_o0: "nopie-O0"]
        [threads_found, calls, kind_waits, kind_holds];
    mutex_kinds_traced: "locks_kinds" Traced => check_kinds [pie_o2: "pie-O2", nopie_o0: "nopie-O0"]
        [threads_found, calls, kind_waits, kind_holds];
    mutex_kinds_calls: "locks_kinds" CallsOnly => check_kinds_calls [pie_o2: "pie-O2", nopie_o0: "nopie-O0"]
        [threads_found, calls, no_waits];
}

#[test]
fn pigz_locks() {
    check_pigz();
}

/// The list above covers each program of this file in exactly the variants its
/// `//# variants:` directive names, and `PROGRAMS` names every `testbins/locks_*` file.
#[test]
fn every_lock_program_is_tested() {
    let on_disk: BTreeSet<String> = dir_entries(&testbins_dir())
        .into_iter()
        .filter(|f| f.starts_with("locks_"))
        .filter_map(|f| f.strip_suffix(".c").or_else(|| f.strip_suffix(".cpp")).map(str::to_string))
        .collect();
    let listed: BTreeSet<String> = PROGRAMS.iter().map(|s| s.to_string()).collect();
    assert_eq!(on_disk, listed, "PROGRAMS must name every testbins/locks_* program");
    assert_lists_every_variant(PROGRAMS, LISTED, "lock_tests!");
}

/// Needs no rewriter: every original builds in each of its variants, exits as its
/// directives say, prints the same twice, and writes a side file with the same lines.
#[test]
fn originals_behave() {
    for name in PROGRAMS {
        let p = program(name);
        for &v in &p.variants {
            let ctx = format!("{name} {v}");
            let bin = {
                let _turn = cpu_turn();
                build(&p, v)
            };
            // The runs take a share: they measure nothing, but must not run next to a timed case.
            let _share = cpu_share();
            let dir = fresh_dir(&format!("locks-original-{name}-{v}"));
            let run = |i: u32| {
                let side = dir.join(format!("run{i}.side"));
                let o =
                    Run::new(&bin, &dir).args(&p.args).env("TIMES_FILE", path_str(&side)).timeout(RUN_TIMEOUT).run();
                let s = Side::read(&side).unwrap_or_else(|e| panic!("{ctx}: side file: {e}"));
                (o, s)
            };
            let (o1, s1) = run(1);
            let (o2, s2) = run(2);
            assert_eq!(o1.status, p.exit, "{ctx}: exit status, want `exit: {}`\n{o1:?}", p.exit);
            assert!(!o1.stdout.is_empty(), "{ctx}: prints nothing\n{o1:?}");
            assert!(
                o1.same_behaviour(&o2),
                "{ctx}: not deterministic\n{}",
                describe_difference("run 1", &o1, "run 2", &o2)
            );
            assert_eq!(s1.shape(), s2.shape(), "{ctx}: the side files of two runs differ in their lines");
            assert!(s1.tid("main") == o1.pid as u64, "{ctx}: side file: tid main is not the pid {}", o1.pid);
        }
    }
}

/// Needs no rewriter: `lock_invariants` accepts a consistent report and names what is
/// wrong in inconsistent ones.
#[test]
fn lock_invariants_check_what_they_say() {
    use serde_json::json;
    let states = |run: u64, mutex: u64| {
        json!({"RUN": run, "BLOCKED_MUTEX": mutex, "BLOCKED_CONDVAR": 0, "BLOCKED_RWLOCK": 0, "BLOCKED_SEMAPHORE": 0,
               "BLOCKED_JOIN": 0, "BLOCKED_BARRIER": 0, "EXITED": 0})
    };
    let good = json!({
        "objects": [{"address": "0x5000", "kind": "mutex", "first_used_in": "f", "first_tid": 10}],
        "threads": [
            {"tid": 10, "main": true, "name": "prog", "start_routine": null, "creator_tid": null, "start_ns": 0,
             "end_ns": null, "exit": "unknown", "exit_value": null, "state": "RUN", "states": states(50 * MS, 0),
             "waits": [{"object": "0x5000", "kind": "mutex", "wait_ns": 0, "count": 1, "contended": 0, "hold_ns": 5}]},
            {"tid": 11, "main": false, "name": "prog", "start_routine": "w", "creator_tid": 10, "start_ns": MS,
             "end_ns": 41 * MS, "exit": "returned", "exit_value": 0, "state": "EXITED", "states": states(10 * MS, 30 * MS),
             "waits": [{"object": "0x5000", "kind": "mutex", "wait_ns": 30 * MS, "count": 1, "contended": 1, "hold_ns": 0}]}
        ]
    });
    let bad = lock_invariants(&good);
    assert!(bad.is_empty(), "a consistent report is rejected: {bad:?}");
    type Break = Box<dyn Fn(&mut Value)>;
    let broken: [(&str, Break); 7] = [
        ("objects[] does not list", Box::new(|r| r["objects"] = json!([]))),
        ("BLOCKED_MUTEX is 0.000 ms", Box::new(|r| r["threads"][1]["states"]["BLOCKED_MUTEX"] = 0.into())),
        ("sum to only", Box::new(|r| r["threads"][1]["waits"][0]["wait_ns"] = MS.into())),
        ("more than its life", Box::new(|r| r["threads"][1]["end_ns"] = (20 * MS).into())),
        ("want ns for exactly", Box::new(|r| r["threads"][0]["states"] = json!({"RUN": 1}))),
        ("exit is", Box::new(|r| r["threads"][1]["exit"] = "finished".into())),
        (
            "only mutexes and rwlocks",
            Box::new(|r| {
                r["objects"][0]["kind"] = "condvar".into();
                r["threads"][0]["waits"][0]["kind"] = "condvar".into();
                r["threads"][1]["waits"][0]["kind"] = "condvar".into();
            }),
        ),
    ];
    for (want, f) in broken {
        let mut r = good.clone();
        f(&mut r);
        let found = lock_invariants(&r);
        assert!(found.iter().any(|m| m.contains(want)), "want a problem mentioning {want:?}, got {found:?}");
    }
}
