//! Behaviour tests (STYLE 17): every program in `testbins/`, in every variant its
//! directives name, is built with gcc, rewritten with `stint rewrite`, and run next to the
//! original with the same arguments and environment. The rewritten program must behave
//! byte for byte like the original (stdout, stderr, exit status), with measurement on and
//! with it off (`STINT_PROFILE=` empty), and its profile must show exactly the call counts
//! the program's `//# expect:` directives state.
//!
//! The directive grammar is documented at the top of `common/mod.rs`.
//!
//! One `#[test]` per program and variant, so a failure names both; `every_program_is_tested`
//! keeps the list below in step with `testbins/`.

use crate::common::*;
use std::collections::BTreeMap;
use std::path::Path;

/// Run the whole behaviour check of one program in one variant.
fn check_behaviour(name: &str, variant_name: &str) {
    let p = program(name);
    let variant = Variant::parse(variant_name).unwrap_or_else(|| panic!("unknown variant {variant_name}"));
    let ctx = format!("{name} {variant}");
    assert!(p.variants.contains(&variant), "{ctx}: the program's `variants:` directive does not list {variant}");

    let bin = build(&p, variant);
    let syms = symbols(&p, variant);
    let addr_of = resolve_counted(&p, &syms, &ctx);

    let out = run_root().join("behaviour").join("rewritten").join(variant.name()).join(name);
    rewrite(&bin, &out);

    // The original, twice: its behaviour must be what the directives say and deterministic,
    // or comparing it with the rewritten program would prove nothing.
    let original = run_program(&bin, &p, None);
    assert!(
        original.status == p.exit,
        "{ctx}: the original exits with {}, the directives say `exit: {}`\n{original:?}",
        original.status,
        p.exit
    );
    assert!(!original.stdout.is_empty(), "{ctx}: the original prints nothing to stdout; test programs must print");
    let again = run_program(&bin, &p, None);
    assert!(
        original.same_behaviour(&again),
        "{ctx}: the original is not deterministic\n{}",
        describe_difference("run 1", &original, "run 2", &again)
    );

    // Rewritten, measuring.
    let profile_dir = fresh_dir(&format!("profiles-{name}-{variant}"));
    let template = profile_template(&profile_dir, name);
    let measured = run_program(&out, &p, Some(&template));
    assert!(
        original.same_behaviour(&measured),
        "{ctx}: the rewritten program (STINT_PROFILE={template}) behaves differently\n{}",
        describe_difference("original", &original, "rewritten", &measured)
    );

    // Rewritten, not measuring.
    let quiet = run_program(&out, &p, Some(""));
    assert!(
        original.same_behaviour(&quiet),
        "{ctx}: the rewritten program with STINT_PROFILE= (off) behaves differently\n{}",
        describe_difference("original", &original, "rewritten, off", &quiet)
    );

    // The profile files: how many, their mode, whose.
    let files = dir_entries(&profile_dir);
    assert!(
        files.len() as u64 == p.profiles(),
        "{ctx}: {} profile files in {} ({files:?}), want {}",
        files.len(),
        profile_dir.display(),
        p.profiles()
    );
    for f in &files {
        let mode = file_mode(&profile_dir.join(f));
        assert!(mode == 0o600, "{ctx}: profile {f} has mode {mode:o}, want 600");
    }
    let parent_file = format!("{name}.{}.stint", measured.pid);
    assert!(files.contains(&parent_file), "{ctx}: no profile {parent_file} for pid {} among {files:?}", measured.pid);

    let parent = report_json(&profile_dir.join(&parent_file));
    // Every counted function must be patched, not skipped: a skipped entry shows up as a
    // wrong count below, and this says why.
    let mut problems = check_inspect(&bin, &addr_of);
    problems.extend(report_invariants(&parent, name, measured.pid, false).into_iter().map(|m| format!("report: {m}")));
    problems.extend(check_expects(&p, Scope::Main, &parent, variant, &addr_of));

    if p.expects_in(Scope::Child).next().is_some() {
        let others: Vec<&String> = files.iter().filter(|f| **f != parent_file).collect();
        if others.len() != 1 {
            problems.push(format!("want exactly one fork-child profile besides {parent_file}, found {others:?}"));
        } else {
            let child = report_json(&profile_dir.join(others[0]));
            let child_pid = child.get("pid").and_then(|x| x.as_u64()).unwrap_or(0) as u32;
            if others[0] != &format!("{name}.{child_pid}.stint") {
                problems.push(format!("child profile {} does not carry the child's pid {child_pid}", others[0]));
            }
            problems.extend(
                report_invariants(&child, name, child_pid, true).into_iter().map(|m| format!("child report: {m}")),
            );
            if child.get("ppid").and_then(|x| x.as_u64()) != Some(measured.pid as u64) {
                problems.push(format!(
                    "child report: ppid is {:?}, want the parent's pid {}",
                    child.get("ppid"),
                    measured.pid
                ));
            }
            problems.extend(check_expects(&p, Scope::Child, &child, variant, &addr_of));
        }
    }
    if !problems.is_empty() {
        panic!(
            "{ctx}: the profile is not what the directives say:\n  {}\nreport of pid {}:\n{}",
            problems.join("\n  "),
            measured.pid,
            excerpt(serde_json::to_string_pretty(&parent).unwrap_or_default().as_bytes(), 12000)
        );
    }
}

/// Run a build of `p` in a fresh working directory. `profile`: None for the original (no
/// STINT_PROFILE at all), Some(template) for a rewritten build. The program must leave its
/// working directory empty (in particular no default `./<program>.<pid>.stint`).
fn run_program(bin: &Path, p: &Program, profile: Option<&str>) -> Outcome {
    let cwd = fresh_dir(&format!("cwd-{}", p.name));
    let mut run = Run::new(bin, &cwd).args(&p.args);
    if let Some(t) = profile {
        run = run.env(stint_layout::ENV_PROFILE, t);
    }
    let o = run.run();
    let left = dir_entries(&cwd);
    assert!(
        left.is_empty(),
        "{} (STINT_PROFILE={profile:?}) left files in its working directory: {left:?}",
        bin.display()
    );
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

macro_rules! behaviour_tests {
    ($($test:ident: $prog:literal $variant:literal;)*) => {
        $(
            #[test]
            fn $test() {
                check_behaviour($prog, $variant);
            }
        )*
        /// (program, variant) of every test above.
        const LISTED: &[(&str, &str)] = &[$(($prog, $variant)),*];
    };
}

behaviour_tests! {
    timers_pie_o2: "timers" "pie-O2";
    timers_nopie_o0: "timers" "nopie-O0";
    recurse_pie_o2: "recurse" "pie-O2";
    recurse_nopie_o0: "recurse" "nopie-O0";
    longjmp_pie_o2: "longjmp" "pie-O2";
    longjmp_nopie_o0: "longjmp" "nopie-O0";
    sigstorm_pie_o2: "sigstorm" "pie-O2";
    sigstorm_nopie_o0: "sigstorm" "nopie-O0";
    selfcopy_pie_o0: "selfcopy" "pie-O0";
    selfcopy_pie_o2: "selfcopy" "pie-O2";
    selfcopy_nopie_o0: "selfcopy" "nopie-O0";
    selfcopy_nopie_o2: "selfcopy" "nopie-O2";
    selfcopy_pie_o2_stripped: "selfcopy" "pie-O2-stripped";
    calltree_pie_o0: "calltree" "pie-O0";
    calltree_pie_o2: "calltree" "pie-O2";
    calltree_nopie_o0: "calltree" "nopie-O0";
    calltree_nopie_o2: "calltree" "nopie-O2";
    calltree_pie_o2_stripped: "calltree" "pie-O2-stripped";
    matmul_pie_o0: "matmul" "pie-O0";
    matmul_pie_o2: "matmul" "pie-O2";
    matmul_nopie_o0: "matmul" "nopie-O0";
    matmul_nopie_o2: "matmul" "nopie-O2";
    matmul_pie_o2_stripped: "matmul" "pie-O2-stripped";
    churn_pie_o0: "churn" "pie-O0";
    churn_pie_o2: "churn" "pie-O2";
    churn_nopie_o0: "churn" "nopie-O0";
    churn_nopie_o2: "churn" "nopie-O2";
    churn_pie_o2_stripped: "churn" "pie-O2-stripped";
    cet_pie_o2: "cet" "pie-O2";
    cet_nopie_o2: "cet" "nopie-O2";
    forker_pie_o0: "forker" "pie-O0";
    forker_pie_o2: "forker" "pie-O2";
    forker_nopie_o0: "forker" "nopie-O0";
    forker_nopie_o2: "forker" "nopie-O2";
    forker_pie_o2_stripped: "forker" "pie-O2-stripped";
    bench_calls_pie_o0: "bench_calls" "pie-O0";
    bench_calls_pie_o2: "bench_calls" "pie-O2";
    bench_calls_nopie_o0: "bench_calls" "nopie-O0";
    bench_calls_nopie_o2: "bench_calls" "nopie-O2";
    bench_calls_pie_o2_stripped: "bench_calls" "pie-O2-stripped";
    bench_locks_pie_o0: "bench_locks" "pie-O0";
    bench_locks_pie_o2: "bench_locks" "pie-O2";
    bench_locks_nopie_o0: "bench_locks" "nopie-O0";
    bench_locks_nopie_o2: "bench_locks" "nopie-O2";
    bench_locks_pie_o2_stripped: "bench_locks" "pie-O2-stripped";
    ctl_loop_pie_o2: "ctl_loop" "pie-O2";
    top_spin_pie_o2: "top_spin" "pie-O2";
    ctl_loop_nopie_o0: "ctl_loop" "nopie-O0";
    locks_mutex_pie_o2: "locks_mutex" "pie-O2";
    locks_mutex_nopie_o0: "locks_mutex" "nopie-O0";
    locks_condvar_pie_o2: "locks_condvar" "pie-O2";
    locks_condvar_nopie_o0: "locks_condvar" "nopie-O0";
    locks_rwlock_pie_o2: "locks_rwlock" "pie-O2";
    locks_rwlock_nopie_o0: "locks_rwlock" "nopie-O0";
    locks_sem_pie_o2: "locks_sem" "pie-O2";
    locks_sem_nopie_o0: "locks_sem" "nopie-O0";
    locks_join_pie_o2: "locks_join" "pie-O2";
    locks_join_nopie_o0: "locks_join" "nopie-O0";
    locks_barrier_pie_o2: "locks_barrier" "pie-O2";
    locks_barrier_nopie_o0: "locks_barrier" "nopie-O0";
    locks_cancel_pie_o2: "locks_cancel" "pie-O2";
    locks_cancel_nopie_o0: "locks_cancel" "nopie-O0";
    locks_counts_pie_o2: "locks_counts" "pie-O2";
    locks_counts_nopie_o0: "locks_counts" "nopie-O0";
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
