//! Behaviour tests (STYLE 17): every program in `testbins/`, in every variant its
//! directives name, is built with gcc, rewritten with `stint rewrite`, and run next to the
//! original with the same arguments and environment. The rewritten program must behave
//! byte for byte like the original (stdout, stderr, exit status), with measurement on and
//! with it off (`STINT_PROFILE=` empty), and its profile must show exactly the call counts
//! the program's `//# expect:` directives state.
//!
//! The directive grammar is documented at the top of `common/mod.rs`.
//!
//! Each program runs once per variant, in whichever of its tests comes first, and each check
//! of `CHECKS` is its own `#[test]` (`common::checks`), so a failure names the program, the
//! variant and the check: `behaviour::calltree::pie_o2::same_output`. `every_program_is_tested`
//! keeps the list below in step with `testbins/`, `every_check_is_tested` the tests with
//! `CHECKS`.

use crate::common::*;
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, OnceLock};

/// The checks of every (program, variant), each one `#[test]`:
///
/// | check | what it asserts |
/// | --- | --- |
/// | `exit_status` | the original exits as the directives say |
/// | `prints` | the original prints to stdout (test programs must) |
/// | `deterministic` | the original behaves the same twice |
/// | `same_output` | the rewritten program, measuring, behaves like the original |
/// | `same_output_off` | the rewritten program with `STINT_PROFILE=` (off) behaves like the original |
/// | `no_files_left` | no run leaves files in its working directory |
/// | `profile_files` | as many profiles as the directives say, each mode 600 |
/// | `patched` | `stint inspect`: every counted function's entry is patched |
/// | `report_invariants` | the report passes the checks every report must pass |
/// | `expects` | the `//# expect:` directives on the report of the process started |
/// | `child_profile` | the fork child's profile and its `expect: child` directives (nothing to check without them) |
const CHECKS: [&str; 11] = [
    "exit_status",
    "prints",
    "deterministic",
    "same_output",
    "same_output_off",
    "no_files_left",
    "profile_files",
    "patched",
    "report_invariants",
    "expects",
    "child_profile",
];

/// The outcome of one program in one variant: the failures of its checks.
struct Case {
    /// `program variant`, for messages.
    ctx: String,
    /// (check, failure), checks from [`CHECKS`].
    problems: Vec<(&'static str, String)>,
    /// The report of the measured run, shown under a failure of a report check.
    report: String,
}

/// The behaviour run of `name` in `variant`: made once per test process by the first of
/// its checks; a test waiting for a run another thread makes meanwhile makes runs of other
/// programs.
fn case(name: &'static str, variant: &str) -> Arc<Case> {
    static CASES: RunCache<(&'static str, Variant), Case> = OnceLock::new();
    let v = Variant::parse(variant).unwrap_or_else(|| panic!("unknown variant {variant}"));
    let all: Vec<(&'static str, Variant)> =
        LISTED.iter().map(|(p, v)| (*p, Variant::parse(v).unwrap_or_else(|| panic!("unknown variant {v}")))).collect();
    cached_run_helping(
        &CASES,
        (name, v),
        &format!("{name} {variant}"),
        || run_behaviour(name, v),
        &all,
        |(p, v)| run_behaviour(p, *v),
    )
}

/// The test of `check` on `name` in `variant`.
fn behaviour_check(name: &'static str, variant: &str, check: &str) {
    assert!(CHECKS.contains(&check), "no behaviour check {check:?}");
    let case = case(name, variant);
    let mine = problems_of(&case.problems, check);
    if mine.is_empty() {
        return;
    }
    let report = if ["report_invariants", "expects", "child_profile", "patched"].contains(&check) {
        format!("\nreport:\n{}", case.report)
    } else {
        String::new()
    };
    panic!("{}: {check}:\n  {}{report}", case.ctx, mine.join("\n  "));
}

/// Build, rewrite and run one program in one variant and make every check of [`CHECKS`],
/// holding a share of the CPU (`common::cpu_share`: not next to the timed tests).
/// Panics (failing every check) only where nothing can be checked: a build, the rewrite,
/// or the measured run's profile missing.
fn run_behaviour(name: &str, variant: Variant) -> Case {
    let _share = cpu_share();
    let p = program(name);
    let ctx = format!("{name} {variant}");
    assert!(p.variants.contains(&variant), "{ctx}: the program's `variants:` directive does not list {variant}");
    let mut problems: Vec<(&'static str, String)> = Vec::new();
    let mut want = |check: &'static str, ok: bool, msg: &dyn Fn() -> String| {
        debug_assert!(CHECKS.contains(&check));
        if !ok {
            problems.push((check, msg()));
        }
    };

    let bin = build(&p, variant);
    let syms = symbols(&p, variant);
    let addr_of = resolve_counted(&p, &syms, &ctx);

    let out = run_root().join("behaviour").join("rewritten").join(variant.name()).join(name);
    rewrite(&bin, &out);

    // The original, twice: its behaviour must be what the directives say and deterministic,
    // or comparing it with the rewritten program would prove nothing.
    let mut left = Vec::new();
    let original = run_program_in(&bin, &p, None, &mut left);
    want("exit_status", original.status == p.exit, &|| {
        format!(
            "{ctx}: the original exits with {}, the directives say `exit: {}`\n{original:?}",
            original.status, p.exit
        )
    });
    want("prints", !original.stdout.is_empty(), &|| {
        format!("{ctx}: the original prints nothing to stdout; test programs must print")
    });
    let again = run_program_in(&bin, &p, None, &mut left);
    want("deterministic", original.same_behaviour(&again), &|| {
        format!(
            "{ctx}: the original is not deterministic\n{}",
            describe_difference("run 1", &original, "run 2", &again)
        )
    });

    // Rewritten, measuring.
    let profile_dir = fresh_dir(&format!("profiles-{name}-{variant}"));
    let template = profile_template(&profile_dir, name);
    let measured = run_program_in(&out, &p, Some(&template), &mut left);
    want("same_output", original.same_behaviour(&measured), &|| {
        format!(
            "{ctx}: the rewritten program (STINT_PROFILE={template}) behaves differently\n{}",
            describe_difference("original", &original, "rewritten", &measured)
        )
    });

    // Rewritten, not measuring.
    let quiet = run_program_in(&out, &p, Some(""), &mut left);
    want("same_output_off", original.same_behaviour(&quiet), &|| {
        format!(
            "{ctx}: the rewritten program with STINT_PROFILE= (off) behaves differently\n{}",
            describe_difference("original", &original, "rewritten, off", &quiet)
        )
    });
    for l in &left {
        want("no_files_left", false, &|| format!("{ctx}: {l}"));
    }

    // The profile files: how many, their mode, whose.
    let files = dir_entries(&profile_dir);
    want("profile_files", files.len() as u64 == p.profiles(), &|| {
        format!("{ctx}: {} profile files in {} ({files:?}), want {}", files.len(), profile_dir.display(), p.profiles())
    });
    for f in &files {
        let mode = file_mode(&profile_dir.join(f));
        want("profile_files", mode == 0o600, &|| format!("{ctx}: profile {f} has mode {mode:o}, want 600"));
    }
    let parent_file = format!("{name}.{}.stint", measured.pid);
    assert!(files.contains(&parent_file), "{ctx}: no profile {parent_file} for pid {} among {files:?}", measured.pid);

    let parent = report_json(&profile_dir.join(&parent_file));
    // Every counted function must be patched, not skipped: a skipped entry shows up as a
    // wrong count in `expects`, and this says why.
    for m in check_inspect(&bin, &addr_of) {
        want("patched", false, &|| m.clone());
    }
    for m in report_invariants(&parent, name, measured.pid, false) {
        want("report_invariants", false, &|| format!("report: {m}"));
    }
    for m in check_expects(&p, Scope::Main, &parent, variant, &addr_of) {
        want("expects", false, &|| m.clone());
    }

    if p.expects_in(Scope::Child).next().is_some() {
        let mut child_problems = Vec::new();
        let others: Vec<&String> = files.iter().filter(|f| **f != parent_file).collect();
        if others.len() != 1 {
            child_problems.push(format!("want exactly one fork-child profile besides {parent_file}, found {others:?}"));
        } else {
            let child = report_json(&profile_dir.join(others[0]));
            let child_pid = child.get("pid").and_then(|x| x.as_u64()).unwrap_or(0) as u32;
            if others[0] != &format!("{name}.{child_pid}.stint") {
                child_problems.push(format!("child profile {} does not carry the child's pid {child_pid}", others[0]));
            }
            child_problems.extend(
                report_invariants(&child, name, child_pid, true).into_iter().map(|m| format!("child report: {m}")),
            );
            if child.get("ppid").and_then(|x| x.as_u64()) != Some(measured.pid as u64) {
                child_problems.push(format!(
                    "child report: ppid is {:?}, want the parent's pid {}",
                    child.get("ppid"),
                    measured.pid
                ));
            }
            child_problems.extend(check_expects(&p, Scope::Child, &child, variant, &addr_of));
        }
        for m in child_problems {
            want("child_profile", false, &|| m.clone());
        }
    }
    let report = format!(
        "report of pid {}:\n{}",
        measured.pid,
        excerpt(serde_json::to_string_pretty(&parent).unwrap_or_default().as_bytes(), 12000)
    );
    Case { ctx, problems, report }
}

/// Run a build of `p` in a fresh working directory. `profile`: None for the original (no
/// STINT_PROFILE at all), Some(template) for a rewritten build. The program must leave its
/// working directory empty (in particular no default `./<program>.<pid>.stint`).
fn run_program(bin: &Path, p: &Program, profile: Option<&str>) -> Outcome {
    let mut left = Vec::new();
    let o = run_program_in(bin, p, profile, &mut left);
    assert!(left.is_empty(), "{}", left.join("\n"));
    o
}

/// [`run_program`], adding what the program left in its working directory to `left`
/// instead of failing.
fn run_program_in(bin: &Path, p: &Program, profile: Option<&str>, left: &mut Vec<String>) -> Outcome {
    let cwd = fresh_dir(&format!("cwd-{}", p.name));
    let mut run = Run::new(bin, &cwd).args(&p.args);
    if let Some(t) = profile {
        run = run.env(stint_layout::ENV_PROFILE, t);
    }
    let o = run.run();
    let files = dir_entries(&cwd);
    if !files.is_empty() {
        left.push(format!(
            "{} (STINT_PROFILE={profile:?}) left files in its working directory: {files:?}",
            bin.display()
        ));
    }
    o
}

/// Addresses (from `nm`) of every function the directives name.
fn resolve_counted(p: &Program, syms: &BTreeMap<String, u64>, ctx: &str) -> BTreeMap<String, u64> {
    let mut m = BTreeMap::new();
    for f in p.counted_functions() {
        let a = syms
            .get(&f)
            .unwrap_or_else(|| panic!("{ctx}: the directives name {f}, which nm does not find in the build"));
        m.insert(f, *a);
    }
    m
}

/// `stint inspect --json`: every counted function has an entry point that is not skipped.
/// Returns the problems.
fn check_inspect(bin: &Path, addr_of: &BTreeMap<String, u64>) -> Vec<String> {
    let r = inspect_json(bin);
    let points = field(&r, "points", "stint inspect --json").as_array().expect("points is an array");
    let mut bad = Vec::new();
    for (f, a) in addr_of {
        let want = hex(*a);
        let entries: Vec<&serde_json::Value> = points
            .iter()
            .filter(|pt| pt.get("kind").and_then(|k| k.as_str()) == Some("entry"))
            .filter(|pt| pt.get("address").and_then(|x| x.as_str()) == Some(want.as_str()))
            .collect();
        match entries.as_slice() {
            [] => bad.push(format!("stint inspect: counted function {f} ({want}) has no entry point")),
            es => {
                for e in es {
                    if e.get("tactic").and_then(|t| t.as_str()).is_none_or(|t| t == "skipped") {
                        bad.push(format!("stint inspect: counted function {f} ({want}) is not patched: {e}"));
                    }
                }
            }
        }
    }
    bad
}

/// The name a report gives the function at `addr` in this variant.
fn report_name(func: &str, addr: u64, variant: Variant) -> String {
    if variant.stripped() {
        format!("sub_{addr:x}")
    } else {
        func.to_string()
    }
}

/// Calls of the function at `addr` in one thread (0 if it is not listed). Checks the name
/// the report gives it.
fn calls_in(thread: &serde_json::Value, func: &str, addr: u64, variant: Variant, bad: &mut Vec<String>) -> u64 {
    let want_addr = hex(addr);
    let want_name = report_name(func, addr, variant);
    let funcs = thread.get("functions").and_then(|f| f.as_array()).map(Vec::as_slice).unwrap_or(&[]);
    if let Some(e) = funcs.iter().find(|e| e.get("address").and_then(|a| a.as_str()) == Some(want_addr.as_str())) {
        if e.get("name").and_then(|n| n.as_str()) != Some(want_name.as_str()) {
            bad.push(format!("{func} at {want_addr} is named {:?}, want {want_name:?}", e.get("name")));
        }
        return e.get("calls").and_then(|c| c.as_u64()).unwrap_or(0);
    }
    if let Some(e) = funcs.iter().find(|e| e.get("name").and_then(|n| n.as_str()) == Some(want_name.as_str())) {
        bad.push(format!("{want_name} is listed at {:?}, want {want_addr} (as nm shows it)", e.get("address")));
    }
    0
}

/// Check the `expect:` directives of one scope against a report; returns the failures.
fn check_expects(
    p: &Program,
    scope: Scope,
    r: &serde_json::Value,
    variant: Variant,
    addr_of: &BTreeMap<String, u64>,
) -> Vec<String> {
    let mut bad = Vec::new();
    let Some(threads) = r.get("threads").and_then(|t| t.as_array()) else {
        return vec!["report has no threads array".into()];
    };
    let main = threads.iter().find(|t| t.get("main").and_then(|m| m.as_bool()) == Some(true));
    let first_is = |t: &serde_json::Value, f: &str| {
        let want = report_name(f, addr_of[f], variant);
        t.get("first_function").and_then(|x| x.as_str()) == Some(want.as_str())
    };
    let scope_name = if scope == Scope::Child { "child " } else { "" };
    for e in p.expects_in(scope) {
        let at = format!("line {}: expect: {scope_name}", e.line);
        match &e.check {
            Check::Profiles(_) => {} // checked on the directory
            Check::Threads(n) => {
                if threads.len() as u64 != *n {
                    bad.push(format!("{at}threads {n}: the report lists {} threads", threads.len()));
                }
            }
            Check::ThreadsFrom { first, n } => {
                let got = threads.iter().filter(|t| first_is(t, first)).count() as u64;
                if got != *n {
                    bad.push(format!("{at}threads from {first} {n}: {got} threads start in {first}"));
                }
            }
            Check::MainCalls { func, n } => {
                let Some(m) = main else {
                    bad.push(format!("{at}main calls {func} {n}: no main thread"));
                    continue;
                };
                let mut naming = Vec::new();
                let got = calls_in(m, func, addr_of[func], variant, &mut naming);
                bad.extend(naming.into_iter().map(|s| format!("{at}main calls {func} {n}: {s}")));
                if got != *n {
                    bad.push(format!("{at}main calls {func} {n}: the main thread has {got}"));
                }
            }
            Check::ThreadCalls { first, func, n } => {
                let matching: Vec<&serde_json::Value> = threads.iter().filter(|t| first_is(t, first)).collect();
                if matching.is_empty() {
                    bad.push(format!("{at}thread {first} calls {func} {n}: no thread starts in {first}"));
                    continue;
                }
                let mut wrong = Vec::new();
                let mut naming = Vec::new();
                for t in &matching {
                    let got = calls_in(t, func, addr_of[func], variant, &mut naming);
                    if got != *n {
                        wrong.push(format!("tid {} has {got}", t.get("tid").unwrap_or(&serde_json::Value::Null)));
                    }
                }
                naming.dedup();
                bad.extend(naming.into_iter().map(|s| format!("{at}thread {first} calls {func} {n}: {s}")));
                if !wrong.is_empty() {
                    let shown: Vec<&String> = wrong.iter().take(5).collect();
                    bad.push(format!(
                        "{at}thread {first} calls {func} {n}: {} of {} threads differ, e.g. {shown:?}",
                        wrong.len(),
                        matching.len()
                    ));
                }
            }
        }
    }
    bad
}

/// Calls `$m!(ARGS... CHECK...)` with the names of [`CHECKS`]: the one list of check tests.
macro_rules! with_behaviour_checks {
    ($m:ident!($($args:tt)*)) => {
        $m! {
            $($args)* exit_status prints deterministic same_output same_output_off no_files_left profile_files
            patched report_invariants expects child_profile
        }
    };
}

/// One module per program and in it one per variant, holding one `#[test]` per check of
/// [`CHECKS`]; `LISTED` names every (program, variant).
macro_rules! behaviour_tests {
    ($($prog:ident: [$($v:ident: $vname:literal),*];)*) => {
        $(
            mod $prog {
                $(
                    mod $v {
                        with_behaviour_checks!(behaviour_tests!(@checks $prog $vname));
                    }
                )*
            }
        )*
        /// (program, variant) of every test above.
        const LISTED: &[(&str, &str)] = &[$($((stringify!($prog), $vname)),*),*];
        with_behaviour_checks!(behaviour_tests!(@list));
    };
    (@checks $prog:ident $vname:literal $($check:ident)*) => {
        $(
            #[test]
            fn $check() {
                super::super::behaviour_check(stringify!($prog), $vname, stringify!($check));
            }
        )*
    };
    (@list $($check:ident)*) => {
        /// The checks each (program, variant) has a test for.
        const TESTED_CHECKS: &[&str] = &[$(stringify!($check)),*];
    };
}

behaviour_tests! {
    timers: [pie_o2: "pie-O2", nopie_o0: "nopie-O0"];
    recurse: [pie_o2: "pie-O2", nopie_o0: "nopie-O0"];
    longjmp: [pie_o2: "pie-O2", nopie_o0: "nopie-O0"];
    sigstorm: [pie_o2: "pie-O2", nopie_o0: "nopie-O0"];
    selfcopy: [pie_o0: "pie-O0", pie_o2: "pie-O2", nopie_o0: "nopie-O0", nopie_o2: "nopie-O2", pie_o2_stripped: "pie-O2-stripped"];
    imports: [pie_o0: "pie-O0", pie_o2: "pie-O2", nopie_o2: "nopie-O2"];
    calltree: [pie_o0: "pie-O0", pie_o2: "pie-O2", nopie_o0: "nopie-O0", nopie_o2: "nopie-O2", pie_o2_stripped: "pie-O2-stripped"];
    matmul: [pie_o0: "pie-O0", pie_o2: "pie-O2", nopie_o0: "nopie-O0", nopie_o2: "nopie-O2", pie_o2_stripped: "pie-O2-stripped"];
    churn: [pie_o0: "pie-O0", pie_o2: "pie-O2", nopie_o0: "nopie-O0", nopie_o2: "nopie-O2", pie_o2_stripped: "pie-O2-stripped"];
    cet: [pie_o2: "pie-O2", nopie_o2: "nopie-O2"];
    compensation: [pie_o2: "pie-O2", nopie_o0: "nopie-O0"];
    sampling: [pie_o2: "pie-O2"];
    sampling_stall: [pie_o2: "pie-O2"];
    states: [pie_o2: "pie-O2", nopie_o0: "nopie-O0"];
    proctree: [pie_o0: "pie-O0", nopie_o2: "nopie-O2"];
    proctree_end: [pie_o0: "pie-O0"];
    proctree_main: [pie_o0: "pie-O0", pie_o2_stripped: "pie-O2-stripped"];
    forker: [pie_o0: "pie-O0", pie_o2: "pie-O2", nopie_o0: "nopie-O0", nopie_o2: "nopie-O2", pie_o2_stripped: "pie-O2-stripped"];
    bench_calls: [pie_o0: "pie-O0", pie_o2: "pie-O2", nopie_o0: "nopie-O0", nopie_o2: "nopie-O2", pie_o2_stripped: "pie-O2-stripped"];
    bench_locks: [pie_o0: "pie-O0", pie_o2: "pie-O2", nopie_o0: "nopie-O0", nopie_o2: "nopie-O2", pie_o2_stripped: "pie-O2-stripped"];
    bench_mutex: [pie_o2: "pie-O2", nopie_o0: "nopie-O0"];
    bench_imports: [pie_o2: "pie-O2", nopie_o0: "nopie-O0"];
    bench_threads: [pie_o2: "pie-O2", nopie_o0: "nopie-O0"];
    ctl_loop: [pie_o2: "pie-O2", nopie_o0: "nopie-O0"];
    top_spin: [pie_o2: "pie-O2"];
    report_opts: [pie_o2: "pie-O2"];
    callpaths: [pie_o2: "pie-O2", nopie_o0: "nopie-O0"];
    locks_mutex: [pie_o2: "pie-O2", nopie_o0: "nopie-O0"];
    locks_condvar: [pie_o2: "pie-O2", nopie_o0: "nopie-O0"];
    locks_rwlock: [pie_o2: "pie-O2", nopie_o0: "nopie-O0"];
    locks_sem: [pie_o2: "pie-O2", nopie_o0: "nopie-O0"];
    locks_join: [pie_o2: "pie-O2", nopie_o0: "nopie-O0"];
    locks_barrier: [pie_o2: "pie-O2", nopie_o0: "nopie-O0"];
    locks_cancel: [pie_o2: "pie-O2", nopie_o0: "nopie-O0"];
    locks_counts: [pie_o2: "pie-O2", nopie_o0: "nopie-O0"];
    locks_kinds: [pie_o2: "pie-O2", nopie_o0: "nopie-O0"];
    entrycov: [pie_o2: "pie-O2"];
    exitcov: [pie_o2: "pie-O2", nopie_o0: "nopie-O0"];
    wrapcomp: [pie_o2: "pie-O2"];
    slowwrap: [pie_o2: "pie-O2"];
    rseqclk: [pie_o2: "pie-O2"];
    rseqcs: [pie_o2: "pie-O2"];
    nowrap: [pie_o2: "pie-O2"];
    sigblock: [pie_o2: "pie-O2"];
}

/// Every check of `CHECKS` has its test in every (program, variant), and no test names a
/// check that does not exist.
#[test]
fn every_check_is_tested() {
    assert_eq!(TESTED_CHECKS, CHECKS, "with_behaviour_checks! must name exactly the checks of CHECKS");
}

/// The list above names every program of `testbins/` in exactly the variants its
/// directives ask for.
#[test]
fn every_program_is_tested() {
    let mut want: Vec<(String, String)> = Vec::new();
    for name in all_programs() {
        let p = program(&name);
        want.extend(p.variants.iter().map(|v| (name.clone(), v.name().to_string())));
    }
    let mut have: Vec<(String, String)> = LISTED.iter().map(|(p, v)| (p.to_string(), v.to_string())).collect();
    want.sort();
    have.sort();
    assert_eq!(have, want, "behaviour_tests! must list each testbins program in each of its variants");
}

/// Needs no rewriter: every original builds in every variant, exits as its directives
/// say, prints the same thing twice, and has every function the directives name; CET
/// builds start every counted function with endbr64.
#[test]
fn originals_build_and_run() {
    let _share = cpu_share();
    let (mut some_stderr, mut some_failure) = (false, false);
    for name in all_programs() {
        let p = program(&name);
        for &v in &p.variants {
            let ctx = format!("{name} {v}");
            let bin = build(&p, v);
            let syms = symbols(&p, v);
            let addr_of = resolve_counted(&p, &syms, &ctx);
            if v.stripped() {
                let own = text_symbols(&bin);
                assert!(!own.contains_key("main"), "{ctx}: still has a symbol table after strip");
            }
            if p.cflags.iter().any(|f| f == "-fcf-protection=full") {
                for (f, a) in &addr_of {
                    let b = code_bytes(&bin, *a, 4);
                    assert_eq!(b, [0xf3, 0x0f, 0x1e, 0xfa], "{ctx}: {f} at {a:#x} does not start with endbr64");
                }
            }
            let o1 = run_program(&bin, &p, None);
            assert_eq!(o1.status, p.exit, "{ctx}: exit status, want `exit: {}`\n{o1:?}", p.exit);
            assert!(!o1.stdout.is_empty(), "{ctx}: prints nothing\n{o1:?}");
            let o2 = run_program(&bin, &p, None);
            assert!(
                o1.same_behaviour(&o2),
                "{ctx}: not deterministic\n{}",
                describe_difference("run 1", &o1, "run 2", &o2)
            );
            some_stderr |= !o1.stderr.is_empty();
            some_failure |= o1.status != 0;
        }
    }
    // At least one program must write to stderr and one exit non-zero, so comparing the
    // rewritten program with the original covers both.
    assert!(some_stderr, "no test program writes to stderr");
    assert!(some_failure, "no test program exits with a non-zero status");
}

/// `len` bytes at virtual address `addr` of an ELF file, found through its program headers.
fn code_bytes(bin: &Path, addr: u64, len: usize) -> Vec<u8> {
    use object::read::elf::{FileHeader as _, ProgramHeader as _};
    let data = std::fs::read(bin).expect("read binary");
    let hdr = object::elf::FileHeader64::<object::Endianness>::parse(&*data).expect("ELF header");
    let en = hdr.endian().expect("endianness");
    for ph in hdr.program_headers(en, &*data).expect("program headers") {
        let (va, off, fsz) = (ph.p_vaddr(en), ph.p_offset(en), ph.p_filesz(en));
        if ph.p_type(en) == object::elf::PT_LOAD && addr >= va && addr + len as u64 <= va + fsz {
            let o = (addr - va + off) as usize;
            return data[o..o + len].to_vec();
        }
    }
    panic!("{}: {addr:#x} is in no loaded segment", bin.display());
}

/// The directive parser: all programs parse, and it is strict.
#[test]
fn directive_parser() {
    for name in all_programs() {
        program(&name); // panics on any malformed directive
    }

    let src = Path::new("t.c");
    let parse = |text: &str| parse_directives("t", src, text);
    let ok = parse(
        "// a test\n//# args: 4 1000\n//# cflags: -pthread\n//# variants: pie-O2 nopie-O2\n//# exit: 3\n\
         //# expect: threads 5\n//# expect: threads from worker 4\n//# expect: main calls f 10\n\
         //# expect: thread worker calls innerp 250000\n#include <stdio.h>\n",
    )
    .expect("valid directives");
    assert_eq!(ok.args, ["4", "1000"]);
    assert_eq!(ok.cflags, ["-pthread"]);
    assert_eq!(ok.variants, [Variant::PieO2, Variant::NopieO2]);
    assert_eq!(ok.exit, 3);
    assert_eq!(ok.profiles(), 1);
    let checks: Vec<Check> = ok.expects.iter().map(|e| e.check.clone()).collect();
    assert_eq!(
        checks,
        [
            Check::Threads(5),
            Check::ThreadsFrom { first: "worker".into(), n: 4 },
            Check::MainCalls { func: "f".into(), n: 10 },
            Check::ThreadCalls { first: "worker".into(), func: "innerp".into(), n: 250000 },
        ]
    );
    assert_eq!(ok.expects[3].line, 9);
    assert_eq!(ok.counted_functions(), ["worker", "f", "innerp"]);

    let defaults = parse("//# expect: main calls main 1\n").expect("defaults");
    assert_eq!(defaults.variants, Variant::ALL);
    assert!(defaults.args.is_empty() && defaults.cflags.is_empty() && defaults.exit == 0);

    let forked =
        parse("//# expect: profiles 2\n//# expect: child main calls g 5\n//# expect: main calls g 7\n").expect("fork");
    assert_eq!(forked.profiles(), 2);
    assert_eq!(forked.expects[1].scope, Scope::Child);
    assert_eq!(forked.expects[2].scope, Scope::Main);

    let rejected = [
        ("//# expcet: main calls f 1\n", "unknown directive"),
        ("//# expect: main calls f ten\n", "not a count"),
        ("//# expect: main calls f -1\n", "not a count"),
        ("//# expect: main calls f 1 2\n", "unknown check"),
        ("//# expect: main call f 1\n", "unknown check"),
        ("//# expect: threads\n", "unknown check"),
        ("//# expect: main calls f() 1\n", "not a function name"),
        ("//# expect: main calls f 1\n//# expect: main calls f 1\n", "the same check twice"),
        ("//# args: 1\n//# args: 2\n//# expect: threads 1\n", "given twice"),
        ("//# variants: pie-O3\n//# expect: threads 1\n", "unknown variant"),
        ("//# variants:\n//# expect: threads 1\n", "at least one"),
        ("//# variants: pie-O2 pie-O2\n//# expect: threads 1\n", "given twice"),
        ("//# exit: 256\n//# expect: threads 1\n", "not an exit status"),
        ("//# exit: 1 2\n//# expect: threads 1\n", "want one number"),
        ("//# cflags: pthread\n//# expect: threads 1\n", "not a flag"),
        ("//#expect: threads 1\n", "one space"),
        ("//# expect threads 1\n", "key: value"),
        ("//# args: 1\n", "no `//# expect:`"),
        ("//# expect: threads 1\nint x;\n//# expect: threads 2\n", "after the header"),
        ("//# expect: child threads 1\n", "profiles N"),
        ("//# expect: child profiles 2\n", "not with child"),
        ("//# expect: profiles 2\n//# expect: threads 1\n", "need child checks"),
        ("//# expect: profiles 0\n", "nothing to check"),
    ];
    for (text, want) in rejected {
        match parse(text) {
            Ok(p) => panic!("accepted {text:?} as {p:?}"),
            Err(e) => assert!(e.contains(want), "{text:?}: error {e:?} does not mention {want:?}"),
        }
    }
}

/// A report that satisfies a program's checks of one scope, as a working rewriter would
/// write it: the main thread, then the threads the `threads from` checks ask for.
fn synthetic_report(p: &Program, scope: Scope, variant: Variant, addr_of: &BTreeMap<String, u64>) -> serde_json::Value {
    use serde_json::json;
    let pid = 4242u64;
    let entry =
        |f: &str, n: u64| json!({"name": report_name(f, addr_of[f], variant), "address": hex(addr_of[f]), "calls": n});
    let mut main_funcs = Vec::new();
    let mut starts: Vec<(String, u64)> = Vec::new();
    for e in p.expects_in(scope) {
        match &e.check {
            Check::MainCalls { func, n } if *n > 0 => main_funcs.push(entry(func, *n)),
            Check::ThreadsFrom { first, n } => starts.push((first.clone(), *n)),
            _ => {}
        }
    }
    let first_of_main = main_funcs[0]["name"].clone();
    let mut threads = vec![json!({"tid": pid, "name": null, "start_routine": null, "first_function": first_of_main,
                                  "main": true, "functions": main_funcs})];
    for (first, n) in starts {
        let mut funcs: Vec<serde_json::Value> = p
            .expects_in(scope)
            .filter_map(|e| match &e.check {
                Check::ThreadCalls { first: f, func, n } if *f == first && *n > 0 => Some(entry(func, *n)),
                _ => None,
            })
            .collect();
        if !funcs.iter().any(|f| f["address"] == hex(addr_of[&first])) {
            funcs.push(entry(&first, 1));
        }
        for _ in 0..n {
            let tid = pid + threads.len() as u64;
            threads.push(json!({"tid": tid, "name": null, "start_routine": hex(addr_of[&first]),
                                "first_function": report_name(&first, addr_of[&first], variant), "main": false,
                                "functions": funcs.clone()}));
        }
    }
    json!({"schema": "stint-profile/1", "program": p.name, "pid": pid, "ppid": 1, "fork_child": scope == Scope::Child,
           "threads": threads, "skipped_reentrant": 0, "lost_threads": 0})
}

/// Needs no rewriter: the checks accept a report that matches every program's directives
/// (by name, or by `sub_<hex>` in the stripped variant, and by nm address), and reject one
/// whose first non-zero main-thread count is off by one, or whose function is misnamed.
#[test]
fn checks_against_synthetic_reports() {
    for name in all_programs() {
        let p = program(&name);
        for &v in &p.variants {
            let ctx = format!("{name} {v}");
            let addr_of = resolve_counted(&p, &symbols(&p, v), &ctx);
            for scope in [Scope::Main, Scope::Child] {
                if p.expects_in(scope).next().is_none() {
                    continue;
                }
                let good = synthetic_report(&p, scope, v, &addr_of);
                let mut bad = report_invariants(&good, &name, 4242, scope == Scope::Child);
                bad.extend(check_expects(&p, scope, &good, v, &addr_of));
                assert!(bad.is_empty(), "{ctx} {scope:?}: a matching report is rejected:\n  {}", bad.join("\n  "));

                let mut off = good.clone();
                let f = &mut off["threads"][0]["functions"][0];
                f["calls"] = (f["calls"].as_u64().unwrap() + 1).into();
                let found = check_expects(&p, scope, &off, v, &addr_of);
                assert!(found.len() == 1 && found[0].contains("main calls"), "{ctx} {scope:?}: off by one: {found:?}");

                let mut misnamed = good.clone();
                misnamed["threads"][0]["functions"][0]["name"] = "wrong_name".into();
                let found = check_expects(&p, scope, &misnamed, v, &addr_of);
                assert!(found.iter().any(|m| m.contains("is named")), "{ctx} {scope:?}: misnamed: {found:?}");
            }
        }
    }
}
