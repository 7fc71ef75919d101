//! Timer tests (DESIGN D3, D7, D11): function exits, the measurement shadow stack and the
//! per-thread CPU and wall timers, checked against clocks the rewriter never touches.
//!
//! Each program below measures itself — it reads CLOCK_THREAD_CPUTIME_ID and
//! CLOCK_MONOTONIC around or inside the functions of interest — and writes what it measured
//! to the side file named by `TIMES_FILE` (format in `testbins/timing.h`). A test builds the
//! program, rewrites it with the default spec (calls, cpu_time and wall_time of every
//! function), runs the original and the rewritten program (stdout, stderr and exit status
//! must be identical), and compares the profile's `cpu_ns` / `wall_ns` (inclusive, per
//! thread) with the side file of the rewritten run. Calls are exact; times are checked with
//! these tolerances (each message repeats the one it applied):
//!
//! | check | tolerance |
//! | --- | --- |
//! | `burn` (timed by its caller around each call) | CPU and wall within max(3 ms, 5 %) of the program's sum; wall at most 1 ms above the program's (its clock reads bracket the call); wall ≥ CPU − max(3 ms, 5 %) |
//! | `main` (timed from its first statement to just before it writes the side file) | CPU and wall within max(3 ms, 5 %) of the program's; the program's wall at most 1 ms above the profile's |
//! | `nap` (nanosleep 100 ms) | wall within ±5 ms of the program's measurement and in [100 ms, 130 ms]; CPU < 5 ms |
//! | recursion, tail calls, frames left by longjmp or exception | within 10 % + 2 ms of the program's measurement (a frame that may close at either of two events: of the range between them) |
//! | nesting: a callee against its caller, a function against its thread's root (`main` or `worker`) | callee ≤ caller + 1 ms |
//! | CPU against wall, every function | cpu_ns ≤ wall_ns + max(3 ms, 5 %) |
//!
//! Exact on every thread: calls (the `//# expect:` directives and per-thread counts the
//! program logic fixes), `unmatched_exits` = 0 and `shadow_overflow` = 0 (every function is
//! timed from the start, no stack is deeper than 40 frames), `abandoned_frames` = 3 per
//! longjmp or throw. A function a check needs must be timed (`cpu_ns`, `wall_ns` integers):
//! the default spec times every function, so `null` there means an exit the rewriter could
//! not patch; a failure then lists the function's points from `stint inspect`.
//!
//! Signal storm accounting: `on_alarm` (the handler) and `tick` (which it calls) are both
//! instrumented. A handler run that interrupts its thread's registration loses all its
//! events — entries and exits of both, 1 to 4 events, each counted in `skipped_reentrant`
//! — so the check is `tick calls + lost = handler runs` with
//! `lost ≤ skipped_reentrant ≤ 4 × lost`, and `calls(tick) = calls(on_alarm)` per thread
//! (`calls(tick) + skipped_reentrant = handler runs` would only hold for an uninstrumented
//! handler whose exit events are never lost). With the signals kept on the main thread
//! (`sigstorm main`), nothing can be lost: `skipped_reentrant` = 0.
//!
//! | program | what it exercises |
//! | --- | --- |
//! | `timers.c` | 3 threads burning 60/120/180 ms of CPU in `burn`; `nap` sleeping 100 ms |
//! | `recurse.c` | recursion (depth 40), mutual recursion (depth 30), sibling tail calls (`jmp` at -O2, checked with objdump) |
//! | `longjmp.c` | `longjmp` over 3 instrumented frames; `abandoned_frames` = 3 per jump |
//! | `unwind.cpp` | a C++ exception thrown through 3 instrumented frames, a destructor run by the unwinder; `abandoned_frames` = 3 per throw. Built here with g++ (the harness builds `*.c` only) |
//! | `sigstorm.c` | a 10 kHz SIGALRM storm whose handler runs instrumented code, while 200 threads come and go; no deadlock, exact calls, lost events accounted for |
//!
//! Every program runs in `pie-O2` (which also has the sibling calls `recurse` needs) and
//! `nopie-O0`, as its `//# variants:` directive says; `every_timer_program_is_tested` keeps
//! the list in step with the directives. Each (program, variant, mode) runs once, in
//! whichever of its tests comes first, and each check is its own `#[test]`
//! (`common::checks`): `timers::recurse::pie_o2::same_output`, `…::tail_calls`. Every case
//! has the checks of its runs (`exit_status`, `same_output`, `same_output_off`,
//! `side_files_agree`) and those `check_common` makes on every report (`report_invariants`,
//! `tsc_hz`, `thread_fields`, `inside_root`, `cpu_within_wall`), then those its program's
//! check function names (the list in `timer_tests!`). The cases take turns (one lock around
//! build, rewrite and runs: `common::cpu_turn`, shared with `locks`, `control` and `top`),
//! so the tests do not steal each other's CPU. The programs read their wall clock nearest the measured call and
//! their CPU clock (a system call, where a thread switch is likely) outside it, so a switch
//! there does not count as wall time of the call (`testbins/timing.h`).

use crate::common::*;
use serde_json::Value;
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

/// A run that takes longer is killed (a deadlock in the runtime) and fails the test.
const RUN_TIMEOUT: Duration = Duration::from_secs(60);

/// One millisecond in ns.
const MS: f64 = 1e6;

/// Slack of a nesting check (callee ≤ caller + this), ns.
const NEST_SLACK_NS: f64 = 1.0 * MS;

/// Tolerance for a function the program timed around its calls: max(3 ms, 5 %).
fn tol_direct(ns: f64) -> f64 {
    (3.0 * MS).max(0.05 * ns.abs())
}
const TOL_DIRECT: &str = "max(3 ms, 5 %)";

/// Tolerance for recursion, tail calls and abandoned frames: 10 % + 2 ms.
fn tol_shadow(ns: f64) -> f64 {
    0.10 * ns.abs() + 2.0 * MS
}
const TOL_SHADOW: &str = "10 % + 2 ms";

// ---------------------------------------------------------------------------------------
// Programs, builds, runs
// ---------------------------------------------------------------------------------------

/// Everything one test run produced.
struct Case {
    /// `program variant [mode]`, for messages.
    ctx: String,
    p: Program,
    bin: PathBuf,
    /// Text symbols of `bin` (nm): name → address.
    syms: BTreeMap<String, u64>,
    measured_pid: u32,
    report: Value,
    /// The side file of the rewritten run.
    times: Times,
    /// The build variant.
    variant: Variant,
    /// The program's arguments, joined (`sigstorm`'s mode).
    mode: String,
    /// The failures of the checks on the runs themselves ([`RUN_CHECKS`]), by check.
    run_problems: Vec<(&'static str, String)>,
}

/// The checks on the three runs of a case, made by `run_case`.
const RUN_CHECKS: [&str; 4] = ["exit_status", "same_output", "same_output_off", "side_files_agree"];

/// The run of `name` in `variant` with `args`: made once per test process (under the CPU
/// turn) by the first check that needs it.
fn case(name: &'static str, variant: &str, args: &'static [&'static str]) -> Arc<Case> {
    static CASES: RunCache<(&'static str, Variant, &'static [&'static str]), Case> = OnceLock::new();
    let v = Variant::parse(variant).unwrap_or_else(|| panic!("unknown variant {variant}"));
    let what = format!("{name} {variant} {}", args.join(" "));
    cached_run(&CASES, (name, v, args), what.trim_end(), || run_case(name, v, args))
}

/// The test of one of [`RUN_CHECKS`] on a case.
fn run_check(case: &Case, check: &str) {
    assert!(RUN_CHECKS.contains(&check), "{}: no run check {check:?}", case.ctx);
    let problems = problems_of(&case.run_problems, check);
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// Build `name` in `variant`, rewrite it, and run the original, the rewritten program
/// measuring, and the rewritten program with measurement off (`STINT_PROFILE=`), one after
/// the other, with `args` and `TIMES_FILE` set. Checks the original's exit status and that
/// all three behave the same (recorded in `run_problems`), and that exactly one profile was
/// written.
fn run_case(name: &str, variant: Variant, args: &[&str]) -> Case {
    let p = program(name);
    let mode = args.join(" ");
    let ctx = if mode.is_empty() { format!("{name} {variant}") } else { format!("{name} {variant} {mode}") };
    assert!(p.variants.contains(&variant), "{ctx}: the program's `variants:` directive does not list {variant}");
    // One case at a time, builds included: on a small machine a compiler running next to a
    // measured program adds milliseconds of preemption to its wall times.
    let _turn = cpu_turn();
    let bin = build(&p, variant);
    let syms = text_symbols(&bin);
    check_program_shape(&ctx, name, variant, &bin);

    let label = format!("{name}-{variant}{}", if mode.is_empty() { String::new() } else { format!("-{mode}") });
    let out = run_root().join("timers").join("rewritten").join(&label).join(name);
    // -O0 code returns through `leave; ret` epilogues that are jump targets and too short for
    // a jump: only the trap tactic times those functions, so the -O0 variants are rewritten
    // with --traps and test it end to end (every function's exits must be patched).
    let traps = variant == Variant::NopieO0;
    if traps {
        std::fs::create_dir_all(out.parent().unwrap()).unwrap_or_else(|e| panic!("{}: {e}", out.display()));
        let o = stint(&["rewrite", bin.to_str().unwrap(), "-o", out.to_str().unwrap(), "--traps", "--quiet"]);
        assert!(o.status == 0, "{ctx}: stint rewrite --traps failed: {}", o.stderr_str());
    } else {
        rewrite(&bin, &out);
    }
    let dir = fresh_dir(&format!("timers-{label}"));
    let profiles = dir.join("profiles");
    std::fs::create_dir_all(&profiles).unwrap_or_else(|e| panic!("{}: {e}", profiles.display()));
    let (orig_times, rw_times) = (dir.join("original.times"), dir.join("rewritten.times"));
    let (cwd_o, cwd_r) = (dir.join("cwd-original"), dir.join("cwd-rewritten"));
    for d in [&cwd_o, &cwd_r] {
        std::fs::create_dir_all(d).unwrap_or_else(|e| panic!("{}: {e}", d.display()));
    }
    let template = profile_template(&profiles, name);

    let (original, measured, quiet) = {
        let original =
            Run::new(&bin, &cwd_o).args(args).env("TIMES_FILE", path_str(&orig_times)).timeout(RUN_TIMEOUT).run();
        let measured = Run::new(&out, &cwd_r)
            .args(args)
            .env(stint_layout::ENV_PROFILE, &template)
            .env("TIMES_FILE", path_str(&rw_times))
            .timeout(RUN_TIMEOUT)
            .run();
        // Rewritten, not measuring: must behave the same as well.
        let quiet = Run::new(&out, &cwd_r)
            .args(args)
            .env(stint_layout::ENV_PROFILE, "")
            .env("TIMES_FILE", path_str(&dir.join("quiet.times")))
            .timeout(RUN_TIMEOUT)
            .run();
        (original, measured, quiet)
    };
    let mut run_problems = Vec::new();
    let mut want = |check: &'static str, ok: bool, msg: &dyn Fn() -> String| {
        if !ok {
            run_problems.push((check, msg()));
        }
    };
    want("exit_status", original.status == p.exit, &|| {
        format!(
            "{ctx}: the original exits with {}, the directives say `exit: {}`\n{original:?}",
            original.status, p.exit
        )
    });
    want("same_output", original.same_behaviour(&measured), &|| {
        format!(
            "{ctx}: the rewritten program (STINT_PROFILE={template}) behaves differently\n{}",
            describe_difference("original", &original, "rewritten", &measured)
        )
    });
    want("same_output_off", original.same_behaviour(&quiet), &|| {
        format!(
            "{ctx}: the rewritten program with STINT_PROFILE= (off) behaves differently\n{}",
            describe_difference("original", &original, "rewritten, off", &quiet)
        )
    });
    let original_times = Times::read(&orig_times).unwrap_or_else(|e| panic!("{ctx}: the original's side file: {e}"));
    let times = Times::read(&rw_times).unwrap_or_else(|e| panic!("{ctx}: the rewritten program's side file: {e}"));
    let keys = |t: &Times| t.rows.iter().map(|(k, _)| k.clone()).collect::<Vec<_>>();
    let (mut k1, mut k2) = (keys(&original_times), keys(&times));
    k1.sort();
    k2.sort();
    want("side_files_agree", k1 == k2, &|| {
        format!("{ctx}: the side files of the original and the rewritten run have different lines: {k1:?} / {k2:?}")
    });

    let files = dir_entries(&profiles);
    let want = format!("{name}.{}.stint", measured.pid);
    assert!(files == [want.clone()], "{ctx}: profiles {files:?} in {}, want just {want}", profiles.display());
    let report = report_json(&profiles.join(&want));
    Case { ctx, p, bin, syms, measured_pid: measured.pid, report, times, variant, mode, run_problems }
}

// ---------------------------------------------------------------------------------------
// The side file
// ---------------------------------------------------------------------------------------

/// The lines of a side file: `KEY TID CPU_NS WALL_NS` or `KEY N` (see testbins/timing.h).
struct Times {
    rows: Vec<(String, Vec<i64>)>,
    text: String,
}

impl Times {
    fn read(path: &Path) -> Result<Times, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let mut rows = Vec::new();
        for (i, line) in text.lines().enumerate() {
            let mut w = line.split_whitespace();
            let key = w.next().ok_or_else(|| format!("{}:{}: empty line", path.display(), i + 1))?;
            let nums: Result<Vec<i64>, _> = w.map(str::parse::<i64>).collect();
            let nums = nums.map_err(|e| format!("{}:{}: {line:?}: {e}", path.display(), i + 1))?;
            if nums.len() != 1 && nums.len() != 3 {
                return Err(format!("{}:{}: {line:?}: want `KEY N` or `KEY TID CPU WALL`", path.display(), i + 1));
            }
            rows.push((key.to_string(), nums));
        }
        Ok(Times { rows, text })
    }

    /// Sums of `KEY TID CPU WALL` lines per tid: tid → (cpu_ns, wall_ns, lines).
    fn by_tid(&self, key: &str) -> BTreeMap<u64, (f64, f64, usize)> {
        let mut m: BTreeMap<u64, (f64, f64, usize)> = BTreeMap::new();
        for (k, v) in &self.rows {
            if k == key && v.len() == 3 {
                let e = m.entry(v[0] as u64).or_default();
                e.0 += v[1] as f64;
                e.1 += v[2] as f64;
                e.2 += 1;
            }
        }
        m
    }

    /// Sums of the `KEY TID CPU WALL` lines of a key written by one thread: (tid, cpu, wall).
    fn one_thread(&self, key: &str) -> (u64, f64, f64) {
        let m = self.by_tid(key);
        let [(tid, (cpu, wall, _))] = m.into_iter().collect::<Vec<_>>()[..] else {
            panic!("side file: want `{key}` lines from exactly one thread:\n{}", self.text);
        };
        (tid, cpu, wall)
    }

    /// The N of the `KEY N` line.
    fn count(&self, key: &str) -> u64 {
        let v: Vec<i64> = self.rows.iter().filter(|(k, v)| k == key && v.len() == 1).map(|(_, v)| v[0]).collect();
        match v[..] {
            [n] if n >= 0 => n as u64,
            _ => panic!("side file: want one `{key} N` line:\n{}", self.text),
        }
    }
}

// ---------------------------------------------------------------------------------------
// Program shape: what the compiler made of the test programs
// ---------------------------------------------------------------------------------------

/// Direct `call`s and `jmp`s in the code of `func`, as (mnemonic, target function), from
/// objdump. Jumps inside the function and to its `.cold` part are left out.
fn branches(bin: &Path, func: &str) -> Vec<(String, String)> {
    let text = String::from_utf8_lossy(&tool(
        "objdump",
        &["-d", "--no-show-raw-insn", &format!("--disassemble={func}"), path_str(bin)],
    ))
    .into_owned();
    let mut v = Vec::new();
    for line in text.lines() {
        let Some(insn) = line.split('\t').nth(1) else { continue };
        let mnemonic = insn.split_whitespace().next().unwrap_or("");
        let kind = if mnemonic.starts_with("call") {
            "call"
        } else if mnemonic.starts_with("jmp") {
            "jmp"
        } else {
            continue;
        };
        let (Some(a), Some(b)) = (insn.find('<'), insn.rfind('>')) else { continue };
        let target = insn[a + 1..b].split('+').next().unwrap_or("").to_string();
        if kind == "jmp" && (target == func || target == format!("{func}.cold")) {
            continue;
        }
        v.push((kind.to_string(), target));
    }
    v
}

/// Check that the compiler built the calls the program's checks rely on: real recursive
/// calls, and sibling calls (`jmp`) exactly where the variant is -O2. Otherwise the test
/// would not test what it says, so fail at once.
fn check_program_shape(ctx: &str, name: &str, variant: Variant, bin: &Path) {
    let sibling = if sibling_calls(variant) { "jmp" } else { "call" };
    let want: &[(&str, &str, &str)] = match name {
        "recurse" => &[
            ("rec", "call", "rec"),
            ("is_even", "call", "is_odd"),
            ("is_odd", "call", "is_even"),
            ("ping", sibling, "pong"),
            ("pong", sibling, "ping"),
            ("tail_a", sibling, "tail_b"),
            ("tail_b", sibling, "tail_c"),
        ],
        "longjmp" => &[("f", "call", "g"), ("g", "call", "h"), ("h", "call", "k")],
        "unwind" => &[("a", "call", "b"), ("b", "call", "c"), ("c", "call", "d")],
        _ => &[],
    };
    for (from, kind, to) in want {
        let got = branches(bin, from);
        assert!(
            got.iter().any(|(k, t)| k == kind && t == to),
            "{ctx}: {from} should reach {to} with a `{kind}` in this build, but its direct branches are {got:?}; \
             the test program no longer tests what it says"
        );
    }
}

/// Whether gcc turns `return g(x)` into `jmp g` in this variant.
fn sibling_calls(variant: Variant) -> bool {
    variant.gcc_flags().contains(&"-O2")
}

// ---------------------------------------------------------------------------------------
// Checking a report
// ---------------------------------------------------------------------------------------

/// A function of the program, found by nm.
#[derive(Clone)]
struct Func {
    name: String,
    addr: u64,
}

/// Collects the failed checks of one case, each under the check (section) it belongs to,
/// and the functions the checks named; the tests of the case's checks then fail on theirs
/// with the side file, the report and the plan of those functions (`common::checks`).
struct Checker<'c> {
    case: &'c Case,
    found: Findings,
    /// Functions named by checks, for the inspect excerpt of a failure.
    used: Vec<u64>,
}

/// What a program's check function found.
struct Checked {
    found: Findings,
    /// Addresses of the functions the checks named.
    used: Vec<u64>,
}

impl<'c> Checker<'c> {
    /// A checker whose failures go to the check `report_invariants` until
    /// [`Checker::section`].
    fn new(case: &'c Case) -> Self {
        Checker { case, found: Findings::new("report_invariants"), used: Vec::new() }
    }

    /// The checks from here on belong to the check `name` (one `#[test]`).
    fn section(&mut self, name: &str) {
        self.found.section(name);
    }

    /// Record a failed check (once: the same failure found twice is listed once).
    fn fail(&mut self, msg: String) {
        self.found.fail(msg);
    }

    /// The function `name` of the build (nm name; for C++ the mangled name).
    fn func(&mut self, name: &str) -> Func {
        let addr = *self
            .case
            .syms
            .get(name)
            .unwrap_or_else(|| panic!("{}: nm does not find {name} in {}", self.case.ctx, self.case.bin.display()));
        if !self.used.contains(&addr) {
            self.used.push(addr);
        }
        Func { name: name.to_string(), addr }
    }

    fn threads(&self) -> &'c [Value] {
        self.case.report.get("threads").and_then(Value::as_array).map(Vec::as_slice).unwrap_or(&[])
    }

    fn main_thread(&mut self) -> Option<&'c Value> {
        let t = self.threads().iter().find(|t| t.get("main").and_then(Value::as_bool) == Some(true));
        if t.is_none() {
            self.fail("the report has no main thread".into());
        }
        t
    }

    fn thread_by_tid(&mut self, tid: u64, what: &str) -> Option<&'c Value> {
        let t = self.threads().iter().find(|t| t.get("tid").and_then(Value::as_u64) == Some(tid));
        if t.is_none() {
            let tids: Vec<&Value> = self.threads().iter().filter_map(|t| t.get("tid")).collect();
            self.fail(format!(
                "{what}: the program wrote from tid {tid}, the report has no such thread (tids {tids:?})"
            ));
        }
        t
    }

    /// The report's entry of `f` in thread `t`, if listed.
    fn entry<'v>(t: &'v Value, f: &Func) -> Option<&'v Value> {
        let want = hex(f.addr);
        t.get("functions")
            .and_then(Value::as_array)?
            .iter()
            .find(|e| e.get("address").and_then(Value::as_str) == Some(want.as_str()))
    }

    /// Calls of `f` in `t` (0 if not listed).
    fn calls(t: &Value, f: &Func) -> u64 {
        Self::entry(t, f).and_then(|e| e.get("calls")).and_then(Value::as_u64).unwrap_or(0)
    }

    /// `key` (`cpu_ns` or `wall_ns`) of `f` in `t`; a failure if the function is not listed
    /// or the value is missing, null or not an integer.
    fn time(&mut self, t: &Value, f: &Func, key: &str) -> Option<f64> {
        let tid = t.get("tid").cloned().unwrap_or(Value::Null);
        let Some(e) = Self::entry(t, f) else {
            self.fail(format!("tid {tid}: {} ({}) is not listed, want it with calls and {key}", f.name, hex(f.addr)));
            return None;
        };
        self.ns(&tid, e, key, false)
    }

    /// `key` of a report's function entry, or a failure saying why not. `null` (a function
    /// that is not timed, e.g. one without exits such as `_start`) fails only if
    /// `!null_ok`.
    fn ns(&mut self, tid: &Value, e: &Value, key: &str, null_ok: bool) -> Option<f64> {
        let why = match e.get(key) {
            Some(v) if v.is_u64() => return v.as_u64().map(|x| x as f64),
            Some(Value::Null) if null_ok => return None,
            Some(Value::Null) => format!(
                "{key} is null (not timed), but the default spec times every function and this check needs it \
                 (see the points below: are its exits patched?)"
            ),
            Some(v) => format!("{key} is {v}, want an integer (ns)"),
            None => format!("{key} is missing"),
        };
        let name = e.get("name").and_then(Value::as_str).unwrap_or("?");
        let addr = e.get("address").and_then(Value::as_str).unwrap_or("?");
        self.fail(format!("tid {tid}: {name} ({addr}): {why}: {e}"));
        None
    }

    /// `got` (profile) within `tol` of `want` (the program's own measurement).
    fn near(&mut self, what: &str, got: Option<f64>, want: f64, tol: f64, rule: &str) {
        let Some(got) = got else { return };
        if (got - want).abs() > tol {
            self.fail(format!(
                "{what}: profile {:.3} ms, program measured {:.3} ms, off by {:+.3} ms; tolerance {rule} = {:.3} ms",
                got / MS,
                want / MS,
                (got - want) / MS,
                tol / MS
            ));
        }
    }

    /// `a` ≤ `b` + `slack`.
    fn at_most(&mut self, what: &str, a: Option<f64>, b: Option<f64>, slack: f64, why: &str) {
        let (Some(a), Some(b)) = (a, b) else { return };
        if a > b + slack {
            self.fail(format!("{what}: {:.3} ms > {:.3} ms + {:.3} ms ({why})", a / MS, b / MS, slack / MS));
        }
    }

    /// Calls of `f` in `t` must be `n`.
    fn calls_eq(&mut self, t: &Value, f: &Func, n: u64, why: &str) {
        let got = Self::calls(t, f);
        if got != n {
            let tid = t.get("tid").cloned().unwrap_or(Value::Null);
            let e = Self::entry(t, f).map(|e| e.to_string()).unwrap_or_else(|| "not listed".into());
            self.fail(format!("tid {tid}: {} called {got} times, want {n} ({why}): {e}", f.name));
        }
    }

    /// An integer field of a thread.
    fn thread_u64(&mut self, t: &Value, key: &str) -> Option<u64> {
        let v = t.get(key).and_then(Value::as_u64);
        if v.is_none() {
            let tid = t.get("tid").cloned().unwrap_or(Value::Null);
            self.fail(format!("tid {tid}: {key} is {}, want an integer", shown(t.get(key))));
        }
        v
    }

    fn finish(self) -> Checked {
        Checked { found: self.found, used: self.used }
    }
}

/// The test of check `section` of `program` (a check function) on `case`; `listed` are
/// the checks the tests name for it.
fn section_check(case: &Case, program: fn(&Case) -> Checked, section: &str, listed: &[&str]) {
    let checked = program(case);
    checked.found.verdict(&case.ctx, section, listed, || {
        format!(
            "profile of pid {}\n--- side file of the rewritten run ---\n{}\n--- report ---\n{}\n\
             --- stint inspect: points of the checked functions ---\n{}",
            case.measured_pid,
            excerpt(case.times.text.as_bytes(), 3000),
            excerpt(serde_json::to_string_pretty(&case.report).unwrap_or_default().as_bytes(), 12000),
            inspect_points(&case.bin, &checked.used)
        )
    });
}

/// How far a profile's `tsc_hz` may be from the frequency this test measures.
const TSC_TOLERANCE: f64 = 0.01;
/// How long the test measures the TSC against the monotonic clock.
const TSC_SPAN: Duration = Duration::from_millis(50);

/// TSC ticks per second, measured once against `Instant` (CLOCK_MONOTONIC) over
/// `TSC_SPAN`. Each end reads the TSC on both sides of the clock read (a vDSO call, tens of
/// ns) and is taken again if the two reads are 10,000 ticks apart or more (a few µs: a
/// thread switch in between), so the error stays under 0.01 %. The TSC of x86-64 Linux
/// machines runs at a constant rate; the runtime assumes so too.
fn tsc_hz() -> f64 {
    static HZ: Mutex<Option<f64>> = Mutex::new(None);
    let mut g = HZ.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(hz) = *g {
        return hz;
    }
    // Safety: rdtsc reads a counter; it has no memory effects and x86-64 always has it.
    let rdtsc = || unsafe { std::arch::x86_64::_rdtsc() };
    let pair = || loop {
        let a = rdtsc();
        let now = std::time::Instant::now();
        let b = rdtsc();
        if b.wrapping_sub(a) < 10_000 {
            break (now, a / 2 + b / 2);
        }
    };
    let (i0, t0) = pair();
    std::thread::sleep(TSC_SPAN);
    let (i1, t1) = pair();
    let hz = (t1 - t0) as f64 / (i1 - i0).as_secs_f64();
    *g = Some(hz);
    hz
}

/// A JSON value as text, or `missing`.
fn shown(v: Option<&Value>) -> String {
    v.map(Value::to_string).unwrap_or_else(|| "missing".into())
}

/// The points `stint inspect --json` plans for the functions at `addrs`, one per line.
fn inspect_points(bin: &Path, addrs: &[u64]) -> String {
    let o = stint(&["inspect", path_str(bin), "--json"]);
    let Ok(v) = serde_json::from_slice::<Value>(&o.stdout) else {
        return format!("(stint inspect --json failed: {o:?})");
    };
    let want: Vec<String> = addrs.iter().map(|a| hex(*a)).collect();
    let lines: Vec<String> = v
        .get("points")
        .and_then(Value::as_array)
        .map(|ps| {
            ps.iter()
                .filter(|p| p.get("address").and_then(Value::as_str).is_some_and(|a| want.iter().any(|w| w == a)))
                .map(Value::to_string)
                .collect()
        })
        .unwrap_or_default();
    lines.join("\n")
}

/// The checks every profile of this file must pass: the generic report invariants, the
/// timer fields of every thread and function, and the time of every function against its
/// thread's root function (`main` on the main thread, `worker` on the others). `exempt`:
/// functions not checked against the root (they may run outside it).
fn check_common(c: &mut Checker, exempt_from_root: &[&str], allow_skipped_reentrant: bool) {
    let case = c.case;
    c.section("report_invariants");
    for m in report_invariants(&case.report, &case.p.name, case.measured_pid, false) {
        if allow_skipped_reentrant && m.starts_with("skipped_reentrant is") {
            continue;
        }
        c.fail(format!("report: {m}"));
    }
    c.section("tsc_hz");
    match case.report.get("tsc_hz").and_then(Value::as_u64) {
        Some(hz) if hz > 0 => {
            // Every wall time is TSC ticks / tsc_hz: a calibration off by x % puts every
            // wall time off by x %. Say so directly rather than through the timings.
            let want = tsc_hz();
            let off = (hz as f64 - want) / want;
            if off.abs() > TSC_TOLERANCE {
                c.fail(format!(
                    "tsc_hz is {hz}, {:+.2} % off the TSC frequency this test measured ({:.0} Hz over {} ms); \
                     want within {:.0} %, or every wall time is off by as much",
                    off * 100.0,
                    want,
                    TSC_SPAN.as_millis(),
                    TSC_TOLERANCE * 100.0
                ));
            }
        }
        _ => c.fail(format!(
            "tsc_hz is {}, want the calibrated TSC frequency (a positive integer)",
            shown(case.report.get("tsc_hz"))
        )),
    }
    let start = case.syms.get("_start").copied();
    let main_fn = c.func("main");
    let worker_fn = case.syms.contains_key("worker").then(|| c.func("worker"));
    let exempt: Vec<u64> = exempt_from_root.iter().filter_map(|n| case.syms.get(*n).copied()).collect();
    for t in c.threads() {
        let tid = t.get("tid").cloned().unwrap_or(Value::Null);
        c.section("thread_fields");
        match t.get("clock_source").and_then(Value::as_str) {
            Some("perf-task-clock+tsc" | "rseq+tsc" | "clock_gettime") => {}
            _ => c.fail(format!(
                "tid {tid}: clock_source is {}, want \"perf-task-clock+tsc\", \"rseq+tsc\" or \"clock_gettime\" (the thread ran timed functions)",
                shown(t.get("clock_source"))
            )),
        }
        for key in ["timer_skipped", "unmatched_exits", "abandoned_frames", "shadow_overflow"] {
            c.thread_u64(t, key);
        }
        // Every function is timed from the start and no stack here is deeper than 40
        // frames: every exit finds its frame, and no frame is dropped.
        for key in ["unmatched_exits", "shadow_overflow"] {
            if let Some(n) = t.get(key).and_then(Value::as_u64) {
                if n != 0 {
                    c.fail(format!(
                        "tid {tid}: {key} is {n}, want 0 (all functions are timed from the start, stacks are shallow)"
                    ));
                }
            }
        }
        c.section("inside_root");
        let is_main = t.get("main").and_then(Value::as_bool) == Some(true);
        let root = if is_main { Some(main_fn.clone()) } else { worker_fn.clone() };
        let root_wall = match &root {
            Some(r) => c.time(t, r, "wall_ns"),
            None => {
                c.fail(format!("tid {tid}: a thread other than main in a program without `worker`"));
                None
            }
        };
        let funcs = t.get("functions").and_then(Value::as_array).map(Vec::as_slice).unwrap_or(&[]);
        for e in funcs {
            let name = e.get("name").and_then(Value::as_str).unwrap_or("?");
            let addr = e.get("address").and_then(Value::as_str).unwrap_or("?");
            c.section("cpu_within_wall");
            let ns = [c.ns(&tid, e, "cpu_ns", true), c.ns(&tid, e, "wall_ns", true)];
            if let (Some(cpu), Some(wall)) = (ns[0], ns[1]) {
                let tol = tol_direct(wall);
                if cpu > wall + tol {
                    let wrapped = if cpu >= (1u64 << 62) as f64 {
                        " (about 2^63 ns: a negative CPU tick difference taken as unsigned)"
                    } else {
                        ""
                    };
                    c.fail(format!(
                        "tid {tid}: {name} ({addr}): cpu_ns {:.3} ms > wall_ns {:.3} ms + {TOL_DIRECT} = {:.3} ms (a thread cannot use more CPU than wall time){wrapped}: {e}",
                        cpu / MS,
                        wall / MS,
                        tol / MS
                    ));
                }
            }
            c.section("inside_root");
            let a = u64::from_str_radix(addr.trim_start_matches("0x"), 16).ok();
            let skip =
                a.is_none() || a == start || a == root.as_ref().map(|r| r.addr) || exempt.contains(&a.unwrap_or(0));
            if !skip {
                let root_name = root.as_ref().map(|r| r.name.as_str()).unwrap_or("?");
                c.at_most(
                    &format!("tid {tid}: wall_ns of {name} ({addr}) against its thread's {root_name}"),
                    ns[1],
                    root_wall,
                    NEST_SLACK_NS,
                    "a function runs inside its thread's root function",
                );
            }
        }
    }
}

/// The `expect:` directives about calls (threads, threads from, main calls, thread calls),
/// matched by address.
fn check_directives(c: &mut Checker) {
    let case = c.case;
    c.section("directives");
    let threads = c.threads();
    for e in &case.p.expects {
        let at = format!("line {}: expect: ", e.line);
        match &e.check {
            Check::Profiles(_) => {}
            Check::Threads(n) => {
                if threads.len() as u64 != *n {
                    c.fail(format!("{at}threads {n}: the report lists {} threads", threads.len()));
                }
            }
            Check::ThreadsFrom { first, n } => {
                let got =
                    threads.iter().filter(|t| t.get("first_function").and_then(Value::as_str) == Some(first)).count();
                if got as u64 != *n {
                    c.fail(format!("{at}threads from {first} {n}: {got} threads start in {first}"));
                }
            }
            Check::MainCalls { func, n } => {
                let f = c.func(func);
                if let Some(m) = c.main_thread() {
                    c.calls_eq(m, &f, *n, &format!("{at}main calls {func} {n}"));
                }
            }
            Check::ThreadCalls { first, func, n } => {
                let f = c.func(func);
                let matching: Vec<&Value> =
                    threads.iter().filter(|t| t.get("first_function").and_then(Value::as_str) == Some(first)).collect();
                if matching.is_empty() {
                    c.fail(format!("{at}thread {first} calls {func} {n}: no thread starts in {first}"));
                }
                let wrong: Vec<String> = matching
                    .iter()
                    .filter(|t| Checker::calls(t, &f) != *n)
                    .map(|t| format!("tid {} has {}", t.get("tid").unwrap_or(&Value::Null), Checker::calls(t, &f)))
                    .collect();
                if !wrong.is_empty() {
                    c.fail(format!(
                        "{at}thread {first} calls {func} {n}: {} of {} threads differ, e.g. {:?}",
                        wrong.len(),
                        matching.len(),
                        &wrong[..wrong.len().min(5)]
                    ));
                }
            }
        }
    }
}

/// `abandoned_frames` of the main thread must be exactly `n`.
fn check_abandoned(c: &mut Checker, n: u64, why: &str) {
    c.section("abandoned_frames");
    let Some(m) = c.main_thread() else { return };
    if let Some(got) = c.thread_u64(m, "abandoned_frames") {
        if got != n {
            c.fail(format!("main thread: abandoned_frames is {got}, want {n} ({why})"));
        }
    }
}

// ---------------------------------------------------------------------------------------
// The programs
// ---------------------------------------------------------------------------------------

/// timers.c: `burn` on three threads, `nap` on main, against the program's own clocks.
fn check_timers(case: &Case) -> Checked {
    let mut c = Checker::new(case);
    check_common(&mut c, &[], false);
    check_directives(&mut c);
    let (burn, worker, nap, main_fn) = (c.func("burn"), c.func("worker"), c.func("nap"), c.func("main"));

    let burns = case.times.by_tid("burn");
    assert!(burns.len() == 3, "{}: side file: want burn lines from 3 threads:\n{}", case.ctx, case.times.text);
    for (tid, (cpu, wall, n)) in burns {
        c.section("burn_threads");
        let Some(t) = c.thread_by_tid(tid, "burn") else { continue };
        c.section("burn_calls");
        c.calls_eq(t, &burn, n as u64, "the program's burn lines");
        c.section("burn_times");
        let what = format!("tid {tid}: burn");
        let p_cpu = c.time(t, &burn, "cpu_ns");
        let p_wall = c.time(t, &burn, "wall_ns");
        c.near(&format!("{what} cpu_ns"), p_cpu, cpu, tol_direct(cpu), TOL_DIRECT);
        c.near(&format!("{what} wall_ns"), p_wall, wall, tol_direct(wall), TOL_DIRECT);
        c.at_most(
            &format!("{what} wall_ns against the program's wall"),
            p_wall,
            Some(wall),
            NEST_SLACK_NS,
            "the program's clock reads bracket each call",
        );
        if let (Some(pc), Some(pw)) = (p_cpu, p_wall) {
            let tol = tol_direct(pc);
            if pw < pc - tol {
                c.fail(format!(
                    "{what}: wall_ns {:.3} ms < cpu_ns {:.3} ms - {TOL_DIRECT} = {:.3} ms",
                    pw / MS,
                    pc / MS,
                    tol / MS
                ));
            }
        }
        c.section("burn_inside_worker");
        let (w_cpu, w_wall) = (c.time(t, &worker, "cpu_ns"), c.time(t, &worker, "wall_ns"));
        c.at_most(&format!("tid {tid}: burn cpu_ns against worker"), p_cpu, w_cpu, NEST_SLACK_NS, "worker calls burn");
        c.at_most(
            &format!("tid {tid}: burn wall_ns against worker"),
            p_wall,
            w_wall,
            NEST_SLACK_NS,
            "worker calls burn",
        );
    }

    let (nap_tid, nap_cpu, nap_wall) = case.times.one_thread("nap");
    c.section("nap");
    if let Some(t) = c.thread_by_tid(nap_tid, "nap") {
        if t.get("main").and_then(Value::as_bool) != Some(true) {
            c.fail(format!("tid {nap_tid} (the program's main thread) is not the report's main thread"));
        }
        let p_cpu = c.time(t, &nap, "cpu_ns");
        let p_wall = c.time(t, &nap, "wall_ns");
        c.near("nap wall_ns", p_wall, nap_wall, 5.0 * MS, "5 ms");
        if let Some(w) = p_wall {
            if !(100.0 * MS..=130.0 * MS).contains(&w) {
                c.fail(format!("nap wall_ns {:.3} ms, want within [100 ms, 130 ms] (nanosleep 100 ms)", w / MS));
            }
        }
        if let Some(cpu) = p_cpu {
            if cpu >= 5.0 * MS {
                c.fail(format!(
                    "nap cpu_ns {:.3} ms, want < 5 ms (it sleeps; the program measured {:.3} ms)",
                    cpu / MS,
                    nap_cpu / MS
                ));
            }
        }
        let (m_cpu, m_wall) = case.times.by_tid("main").get(&nap_tid).map(|x| (x.0, x.1)).unwrap_or_else(|| {
            panic!("{}: side file: no main line from tid {nap_tid}:\n{}", case.ctx, case.times.text)
        });
        let (pm_cpu, pm_wall) = (c.time(t, &main_fn, "cpu_ns"), c.time(t, &main_fn, "wall_ns"));
        c.at_most("nap wall_ns against main", p_wall, pm_wall, NEST_SLACK_NS, "main calls nap");
        c.section("main_times");
        // main's own measurement starts after main's entry and stops before it writes the
        // side file and prints: the profile may be a little longer, never shorter.
        c.near("main cpu_ns", pm_cpu, m_cpu, tol_direct(m_cpu), TOL_DIRECT);
        c.near("main wall_ns", pm_wall, m_wall, tol_direct(m_wall), TOL_DIRECT);
        c.at_most(
            "the program's wall of main against the profile's",
            Some(m_wall),
            pm_wall,
            NEST_SLACK_NS,
            "main measures inside its own activation",
        );
    }
    c.finish()
}

/// recurse.c: recursion counted once per outermost activation; sibling calls close the
/// caller's frame.
fn check_recurse(case: &Case) -> Checked {
    let mut c = Checker::new(case);
    check_common(&mut c, &[], false);
    check_directives(&mut c);
    c.section("recursion_counted_once");
    let Some(m) = c.main_thread() else { return c.finish() };
    let f: HashMap<&str, Func> = ["rec", "is_even", "is_odd", "ping", "pong", "tail_a", "tail_b", "tail_c"]
        .into_iter()
        .map(|n| (n, c.func(n)))
        .collect();
    let t = |c: &mut Checker, name: &str, key: &str| c.time(m, &f[name], key);
    let sibling = sibling_calls(case.variant);

    // rec and is_even are their own outermost callers: their inclusive time is the time
    // main measured around the outermost calls; counted per level, it would be ~20 times that.
    for (name, key) in [("rec", "rec"), ("is_even", "is_even")] {
        let (_, cpu, wall) = case.times.one_thread(key);
        let (p_cpu, p_wall) = (t(&mut c, name, "cpu_ns"), t(&mut c, name, "wall_ns"));
        c.near(&format!("{name} wall_ns (recursion counted once)"), p_wall, wall, tol_shadow(wall), TOL_SHADOW);
        c.near(&format!("{name} cpu_ns (recursion counted once)"), p_cpu, cpu, tol_shadow(cpu), TOL_SHADOW);
    }
    let (odd, even) = (t(&mut c, "is_odd", "wall_ns"), t(&mut c, "is_even", "wall_ns"));
    c.at_most("is_odd wall_ns against is_even", odd, even, NEST_SLACK_NS, "is_odd runs only inside is_even");

    // ping/pong: 15 levels each with the same spin, each level timed by the program.
    c.section("ping_pong");
    let (_, _, ping_wall) = case.times.one_thread("ping");
    let (p_ping, p_pong) = (t(&mut c, "ping", "wall_ns"), t(&mut c, "pong", "wall_ns"));
    if sibling {
        // Each jmp ends one activation before the next begins: each has its own levels' spins
        // (equal rounds, but not equal wall time on a loaded machine) and shares what main
        // measured outside the spins (calls, returns, trampolines) with the other.
        let levels = [case.times.one_thread("ping_levels").2, case.times.one_thread("pong_levels").2];
        let between = ping_wall - levels[0] - levels[1];
        for ((name, got), own) in [("ping", p_ping), ("pong", p_pong)].into_iter().zip(levels) {
            let want = own + between / 2.0;
            c.near(
                &format!("{name} wall_ns (sibling calls: its levels' spins and half of the rest of ping(29))"),
                got,
                want,
                tol_shadow(want),
                TOL_SHADOW,
            );
        }
        c.at_most(
            "ping + pong wall_ns against main's measurement around ping(29)",
            p_ping.zip(p_pong).map(|(a, b)| a + b),
            Some(ping_wall),
            NEST_SLACK_NS,
            "sibling calls do not overlap",
        );
    } else {
        c.near("ping wall_ns (mutual recursion counted once)", p_ping, ping_wall, tol_shadow(ping_wall), TOL_SHADOW);
        c.at_most("pong wall_ns against ping", p_pong, p_ping, NEST_SLACK_NS, "pong runs only inside ping");
    }

    // tail_a -> tail_b -> tail_c: with sibling calls each function's time is its own spin;
    // with real calls each includes the ones it calls.
    c.section("tail_calls");
    let (_, _, tail_wall) = case.times.one_thread("tail");
    let spans: Vec<f64> = ["tail_a", "tail_b", "tail_c"].iter().map(|k| case.times.one_thread(k).2).collect();
    let mut sum = Some(0.0);
    for (i, name) in ["tail_a", "tail_b", "tail_c"].into_iter().enumerate() {
        let got = t(&mut c, name, "wall_ns");
        let (want, how) = if sibling {
            (spans[i], "its own spin (it ends in a jmp)")
        } else {
            (spans[i..].iter().sum(), "its spin and its callees'")
        };
        c.near(&format!("{name} wall_ns ({how})"), got, want, tol_shadow(want), TOL_SHADOW);
        c.at_most(
            &format!("{name} wall_ns against main's measurement around tail_a"),
            got,
            Some(tail_wall),
            NEST_SLACK_NS,
            "a tail-called function returns to tail_a's caller",
        );
        sum = sum.zip(got).map(|(s, g)| s + g);
    }
    if sibling {
        c.at_most(
            "tail_a + tail_b + tail_c wall_ns against main's measurement around tail_a",
            sum,
            Some(tail_wall),
            NEST_SLACK_NS,
            "sibling calls do not overlap",
        );
    }
    c.finish()
}

/// longjmp.c and unwind.cpp: frames left without a ret are closed at the next event above
/// them. `outer` sets the jump buffer or catches and then calls `after`; `left` are the
/// frames it leaves, outermost first, each with the side-file keys of its shortest and
/// longest time the program measured: from the clock read at its top (after its entry
/// trampoline) or by its caller just before the call (before it), to the earliest or the
/// latest event above it where it may be closed. On a loaded machine a thread switch
/// between the caller's read and the function's own (in the entry trampolines' system
/// calls) counts in the function's time, so only the pair brackets it; `extra_calls` more
/// (nm name, calls) pairs of the main thread to check.
fn check_left_frames(case: &Case, outer: &str, left: [(&str, &str, &str); 3], extra_calls: &[(&str, u64)]) -> Checked {
    const JUMPS: u64 = 50;
    let mut c = Checker::new(case);
    check_common(&mut c, &[], false);
    check_directives(&mut c);
    check_abandoned(
        &mut c,
        3 * JUMPS,
        &format!("{}, {} and {} are left without a ret on each of the {JUMPS} jumps", left[0].0, left[1].0, left[2].0),
    );
    c.section("calls");
    let Some(m) = c.main_thread() else { return c.finish() };
    for (name, n) in extra_calls {
        let f = c.func(name);
        c.calls_eq(m, &f, *n, "called once per jump");
    }
    c.section("outer_and_after");
    let outer_f = c.func(outer);
    let after = c.func("after");
    let (_, cpu, wall) = case.times.one_thread(outer);
    let (p_cpu, p_wall) = (c.time(m, &outer_f, "cpu_ns"), c.time(m, &outer_f, "wall_ns"));
    c.near(&format!("{outer} wall_ns"), p_wall, wall, tol_shadow(wall), TOL_SHADOW);
    c.near(&format!("{outer} cpu_ns"), p_cpu, cpu, tol_shadow(cpu), TOL_SHADOW);
    let (_, a_cpu, a_wall) = case.times.one_thread("after");
    let pa_wall = c.time(m, &after, "wall_ns");
    let pa_cpu = c.time(m, &after, "cpu_ns");
    c.near("after wall_ns", pa_wall, a_wall, tol_shadow(a_wall), TOL_SHADOW);
    c.near("after cpu_ns", pa_cpu, a_cpu, tol_shadow(a_cpu), TOL_SHADOW);
    c.at_most(
        &format!("after wall_ns against {outer}"),
        pa_wall,
        p_wall,
        NEST_SLACK_NS,
        &format!("{outer} calls after"),
    );
    c.section("left_frames");
    let mut caller = (outer.to_string(), p_wall);
    for (name, early, late) in left {
        let f = c.func(name);
        let got = c.time(m, &f, "wall_ns");
        let (lo, hi) = (case.times.one_thread(early).2, case.times.one_thread(late).2);
        let tol = tol_shadow(hi);
        if let Some(g) = got {
            if g < lo - tol || g > hi + tol {
                let when = if early == late {
                    format!("{early} in the side file, {:.3} ms", lo / MS)
                } else {
                    format!("between {early} and {late} in the side file, {:.3} to {:.3} ms", lo / MS, hi / MS)
                };
                c.fail(format!(
                    "{name} wall_ns (left without a ret, closed at the next event above its frame): profile {:.3} ms, \
                     program measured {when}; tolerance {TOL_SHADOW} = {:.3} ms",
                    g / MS,
                    tol / MS
                ));
            }
        }
        c.at_most(&format!("{name} wall_ns against {}", caller.0), got, caller.1, NEST_SLACK_NS, "called by it");
        caller = (name.to_string(), got);
    }
    c.finish()
}

fn check_longjmp(case: &Case) -> Checked {
    // g, h and k close at the call of f's landing clock read (see longjmp.c).
    check_left_frames(case, "f", [("g", "g", "g_call"), ("h", "h", "h_call"), ("k", "k", "k_call")], &[])
}

fn check_unwind(case: &Case) -> Checked {
    // d closes at the entry of ~Guard (called by the unwinder in b's landing pad), c there
    // (same stack pointer) or in a's catch block, b in a's catch block (see unwind.cpp).
    // Guard's constructor and destructor (C1/C2 and D1/D2 share an address) are counted.
    check_left_frames(
        case,
        "a",
        [("b", "b", "b_call"), ("c", "c", "c_late_call"), ("d", "d", "d_call")],
        &[("_ZN5GuardC2Ev", 50), ("_ZN5GuardD2Ev", 50)],
    )
}

/// sigstorm.c in one mode (`main` or `workers`: who takes the signals).
fn check_sigstorm(case: &Case) -> Checked {
    const THREADS: usize = 200;
    const WORKS: u64 = 50;
    let to_workers = case.mode == "workers";
    let mut c = Checker::new(case);
    // With handlers on workers, on_alarm and tick may run on a thread before its start
    // routine or after it returned.
    let exempt: &[&str] = if to_workers { &["on_alarm", "tick"] } else { &[] };
    check_common(&mut c, exempt, to_workers);
    let (work, worker, tick, on_alarm) = (c.func("work"), c.func("worker"), c.func("tick"), c.func("on_alarm"));
    c.section("side_file");
    let handler = case.times.count("handler");
    if case.times.count("tick") != handler {
        c.fail(format!("side file: tick {} != handler {handler}", case.times.count("tick")));
    }
    if handler == 0 {
        c.fail("the program saw no SIGALRM at all".into());
    }

    c.section("worker_threads");
    let threads = c.threads();
    let others: Vec<&Value> = threads.iter().filter(|t| t.get("main").and_then(Value::as_bool) != Some(true)).collect();
    if others.len() != THREADS {
        c.fail(format!("{} threads besides main, want {THREADS}", others.len()));
    }
    let firsts: &[&str] = if to_workers { &["worker", "on_alarm"] } else { &["worker"] };
    for t in &others {
        c.calls_eq(t, &work, WORKS, "each worker calls work 50 times");
        c.calls_eq(t, &worker, 1, "each thread runs worker once");
        let first = t.get("first_function").and_then(Value::as_str);
        if !first.is_some_and(|f| firsts.contains(&f)) {
            c.fail(format!(
                "tid {}: first_function is {first:?}, want one of {firsts:?}",
                t.get("tid").unwrap_or(&Value::Null)
            ));
        }
        let (w, wk) = (c.time(t, &work, "wall_ns"), c.time(t, &worker, "wall_ns"));
        c.at_most(
            &format!("tid {}: work wall_ns against worker", t.get("tid").unwrap_or(&Value::Null)),
            w,
            wk,
            NEST_SLACK_NS,
            "worker calls work",
        );
    }
    c.section("main_no_work");
    if let Some(m) = c.main_thread() {
        c.calls_eq(m, &work, 0, "main does not call work");
    }
    c.section("tick_inside_on_alarm");
    for t in threads {
        // tick runs only inside on_alarm.
        let (tk, oa) = (Checker::calls(t, &tick), Checker::calls(t, &on_alarm));
        if tk != oa {
            c.fail(format!(
                "tid {}: tick called {tk} times, on_alarm {oa} times; on_alarm calls tick once, and an event lost \
                 in a handler loses both",
                t.get("tid").unwrap_or(&Value::Null)
            ));
        }
        if tk > 0 {
            let (a, b) = (c.time(t, &tick, "wall_ns"), c.time(t, &on_alarm, "wall_ns"));
            c.at_most(
                &format!("tid {}: tick wall_ns against on_alarm", t.get("tid").unwrap_or(&Value::Null)),
                a,
                b,
                NEST_SLACK_NS,
                "on_alarm calls tick",
            );
        }
    }

    // Every handler run either counts tick (and on_alarm) or, when it interrupted its
    // thread's registration, loses all its events (entries and exits of on_alarm and tick:
    // 1 to 4 events) into skipped_reentrant.
    c.section("lost_events");
    let ticks: u64 = threads.iter().map(|t| Checker::calls(t, &tick)).sum();
    let skipped = case.report.get("skipped_reentrant").and_then(Value::as_u64);
    let totals = format!(
        "handler runs {handler} (program), tick calls {ticks} (profile, all threads), skipped_reentrant {skipped:?}, \
         timer_skipped {} (all threads)",
        threads.iter().filter_map(|t| t.get("timer_skipped").and_then(Value::as_u64)).sum::<u64>()
    );
    if ticks > handler {
        c.fail(format!("more tick calls than handler runs: {totals}"));
    } else if let Some(s) = skipped {
        let lost = handler - ticks;
        if to_workers {
            if !(lost <= s && s <= 4 * lost) {
                c.fail(format!(
                    "{lost} handler runs lost their calls; want lost <= skipped_reentrant <= 4 * lost: {totals}"
                ));
            }
        } else if lost != 0 || s != 0 {
            c.fail(format!(
                "all handlers run on main, registered before the timer started: want tick calls == handler runs and \
                 skipped_reentrant == 0: {totals}"
            ));
        }
        if !to_workers {
            if let Some(m) = c.main_thread() {
                let on_main = Checker::calls(m, &tick);
                if on_main != ticks {
                    c.fail(format!(
                        "{} tick calls on threads other than main, whose SIGALRM is blocked: {totals}",
                        ticks - on_main
                    ));
                }
            }
        }
    }
    if !to_workers {
        check_directives(&mut c);
    }
    eprintln!("{}: {totals}", case.ctx);
    c.finish()
}

// ---------------------------------------------------------------------------------------
// The tests
// ---------------------------------------------------------------------------------------

/// One module per (program, mode) and in it one per variant, holding one `#[test]` per
/// check: the checks on the runs (`RUN_CHECKS`), the ones `check_common` makes on every
/// report, and the program's own, which are the sections of its check function. `LISTED`
/// names every (program, variant).
macro_rules! timer_tests {
    ($($mode:ident: $prog:literal $args:expr => $check:ident [$($v:ident: $vname:literal),*] $checks:tt;)*) => {
        $(
            mod $mode {
                use super::*;
                timer_tests!(@variants $prog ($args) $check [$($v $vname),*] $checks);
            }
        )*
        /// (program, variant) of every case above.
        const LISTED: &[(&str, &str)] = &[$($(($prog, $vname)),*),*];
    };
    (@variants $prog:literal $args:tt $check:ident [$($v:ident $vname:literal),*] $checks:tt) => {
        $(
            mod $v {
                use super::*;
                timer_tests!(@checks $prog $vname $args $check $checks);
            }
        )*
    };
    (@checks $prog:literal $vname:literal $args:tt $check:ident [$($name:ident),*]) => {
        /// The checks of the report: `check_common`'s, then the program's.
        const CHECKS: &[&str] = &[
            "report_invariants",
            "tsc_hz",
            "thread_fields",
            "inside_root",
            "cpu_within_wall",
            $(stringify!($name)),*
        ];
        fn this_case() -> Arc<Case> {
            case($prog, $vname, $args)
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
        fn side_files_agree() {
            run_check(&this_case(), "side_files_agree");
        }
        #[test]
        fn report_invariants() {
            section_check(&this_case(), $check, "report_invariants", CHECKS);
        }
        #[test]
        fn tsc_hz() {
            section_check(&this_case(), $check, "tsc_hz", CHECKS);
        }
        #[test]
        fn thread_fields() {
            section_check(&this_case(), $check, "thread_fields", CHECKS);
        }
        #[test]
        fn inside_root() {
            section_check(&this_case(), $check, "inside_root", CHECKS);
        }
        #[test]
        fn cpu_within_wall() {
            section_check(&this_case(), $check, "cpu_within_wall", CHECKS);
        }
        $(
            #[test]
            fn $name() {
                section_check(&this_case(), $check, stringify!($name), CHECKS);
            }
        )*
    };
}

timer_tests! {
    timers: "timers" &[] => check_timers [pie_o2: "pie-O2", nopie_o0: "nopie-O0"]
        [directives, burn_threads, burn_calls, burn_times, burn_inside_worker, nap, main_times];
    recurse: "recurse" &[] => check_recurse [pie_o2: "pie-O2", nopie_o0: "nopie-O0"]
        [directives, recursion_counted_once, ping_pong, tail_calls];
    longjmp: "longjmp" &[] => check_longjmp [pie_o2: "pie-O2", nopie_o0: "nopie-O0"]
        [directives, abandoned_frames, calls, outer_and_after, left_frames];
    unwind: "unwind" &[] => check_unwind [pie_o2: "pie-O2", nopie_o0: "nopie-O0"]
        [directives, abandoned_frames, calls, outer_and_after, left_frames];
    sigstorm_main: "sigstorm" &["main"] => check_sigstorm [pie_o2: "pie-O2", nopie_o0: "nopie-O0"]
        [side_file, worker_threads, main_no_work, tick_inside_on_alarm, lost_events, directives];
    sigstorm_workers: "sigstorm" &["workers"] => check_sigstorm [pie_o2: "pie-O2", nopie_o0: "nopie-O0"]
        [side_file, worker_threads, main_no_work, tick_inside_on_alarm, lost_events];
}

/// The list above covers each program of this file in exactly the variants its
/// `//# variants:` directive names.
#[test]
fn every_timer_program_is_tested() {
    // sigstorm is listed twice per variant (two modes).
    assert_lists_every_variant(&["timers", "recurse", "longjmp", "unwind", "sigstorm"], LISTED, "timer_tests!");
}

/// Needs no rewriter: the side-file parser takes both line shapes and rejects others.
#[test]
fn side_file_parser() {
    let dir = fresh_dir("times-parser");
    let good = dir.join("good");
    std::fs::write(&good, "burn 7 10 20\nburn 7 1 2\nburn 8 5 6\nhandler 12\n").unwrap();
    let t = Times::read(&good).expect("valid side file");
    assert_eq!(t.by_tid("burn")[&7], (11.0, 22.0, 2));
    assert_eq!(t.by_tid("burn")[&8], (5.0, 6.0, 1));
    assert_eq!(t.count("handler"), 12);
    for bad in ["burn 7 10\n", "burn x 1 2\n", "\n"] {
        let p = dir.join("bad");
        std::fs::write(&p, bad).unwrap();
        assert!(Times::read(&p).is_err(), "accepted {bad:?}");
    }
}
