//! Library time at the import boundary (DESIGN D19) and tail jumps into imports (D17).
//!
//! `testbins/imports.c` (two workers calling `strlen` through the PLT an exact number of
//! times and `qsort` with a callback of the program; `usleep(300000)` from main, and `nap`,
//! which at -O2 is `jmp usleep@plt`) is built in three variants and with `-fno-plt` (calls
//! through `call [rip+GOT]`), rewritten with the default spec and run next to the original;
//! `testbins/imports_eh.cpp` throws `std::bad_alloc` out of `operator new` / `operator new[]`
//! through patched call sites (in a function without an exception table, under a destructor's
//! cleanup, in a `noexcept` function, and under `catch` clauses: one that matches, one of
//! another type, one that rethrows, `catch (...)`), built with g++ (pie-O2, pie-O0, nopie-O2)
//! and clang++ (-O2, -O0), and cancels a thread inside `usleep` called from a patched site. pigz from Debian must show `deflate` under its
//! compression threads.
//!
//! | test | what it proves |
//! | --- | --- |
//! | `calls::*` | each worker lists `strlen` with exactly the calls it made and `qsort` 110 times, the callback under the worker too; nothing of it on main |
//! | `usleep::*` | main's `usleep` wall time is at least 300 ms per call; `nap`, whose -O2 body is `jmp usleep@plt`, too (its frame kept open until usleep returns); `lookup` (`jmp getenv@plt`) is marked "time ends at tail jump to getenv" in inspect, the profile's meta and `stint report` |
//! | `inspect_lists_import_sites` | `stint inspect --json` lists patched sites with their caller and skipped ones with the reason |
//! | `exception::*` | the bad_alloc crosses the patched sites (same output; `operator new` counted and timed); through `cleaned`'s site the cleanup runs (`~Tally` counted by the program) |
//! | `catch_matches::*` | `guarded`'s call under `catch (const std::bad_alloc &)` is patched and its handler catches the bad_alloc thrown in the timed call (same output and exit); its import's row counts exactly the calls of its patched sites, timed |
//! | `catch_mismatch_propagates::*` | under a `catch` of `std::length_error` the bad_alloc passes on to main's catch |
//! | `catch_rethrows::*` | the handler runs once and its `throw;` reaches main's catch |
//! | `catch_all::*` | `catch (...)` (a null type-table entry) catches |
//! | `noexcept_terminates::*` | a bad_alloc thrown out of the timed call in the `noexcept` `must` terminates the program (SIGABRT, libstdc++'s message) as in the original, instead of reaching the caller's `catch(...)`; with clang, whose `noexcept` is a catch-all pad calling `__clang_call_terminate`, too |
//! | `cancel_*` | the forced unwinding from `usleep` crosses the patched site and runs `~Guard` |
//! | `pigz_deflate_*` | pigz -p 2 rewritten with the default spec: same output; `deflate` with calls and time on the compression threads |
//! | `calls_only::*` | imports.c with only `calls` (the trampolines count and tail-jump to the callee): same output, exact `strlen` and `qsort` counts, nothing timed, and no thread opened a perf page (`CFG_NO_TIMERS`: every clock source is `clock_gettime`) |
//! | `call_patches::*` | every patched import call site of the output is `nop`s then a `call` ending where the program's call ended (the same return address, D1) |

use crate::common::*;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

const RUN_TIMEOUT: Duration = Duration::from_secs(120);
/// `//# args:` of imports.c: workers, strlen calls per worker.
const WORKERS: u64 = 2;
const STRLEN_CALLS: u64 = 1000;
/// qsort calls per worker in imports.c.
const QSORT_CALLS: u64 = 110;
const USLEEP_NS: u64 = 300_000_000;

/// How a program of this module is built.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Build {
    /// A variant of the harness (`//# variants:`).
    Std(Variant),
    /// imports.c with `-fno-plt` at -O0 / -O2 (PIE): imports called through the GOT.
    NoPlt(&'static str),
    /// A C++ program built with clang++ at -O0 / -O2 (PIE): clang's exception tables
    /// (`noexcept` is a catch-all pad calling `__clang_call_terminate`).
    Clang(&'static str),
}

/// The outcome of running one program rewritten with the default spec next to the original.
struct Case {
    original: Outcome,
    rewritten: Outcome,
    report: Value,
    /// `stint report` as text.
    report_text: String,
    inspect: Value,
    /// The profile's meta (the self-description), from `stint report --format json`'s file.
    meta: Value,
    /// The rewritten program.
    out: PathBuf,
}

/// Only `calls`: no import call site is timed.
const CALLS_ONLY: &str = "metrics: [{name: calls, kind: counter, at: entry, on_at_start: true}]\n";

fn build_prog(name: &str, b: Build) -> PathBuf {
    match b {
        Build::Std(v) => build(&program(name), v),
        Build::NoPlt(opt) => {
            let dir = run_root().join("build-imports").join(format!("noplt-{opt}"));
            std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
            let out = dir.join(name);
            let src = testbins_dir().join(format!("{name}.c"));
            let args = [
                "-Wall",
                "-Werror",
                opt,
                "-fPIE",
                "-pie",
                "-fno-plt",
                "-pthread",
                path_str(&src),
                "-o",
                path_str(&out),
            ];
            tool("gcc", &args);
            out
        }
        Build::Clang(opt) => {
            let dir = run_root().join("build-imports").join(format!("clang{opt}"));
            std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
            let out = dir.join(name);
            let src = testbins_dir().join(format!("{name}.cpp"));
            let args = ["-Wall", "-Werror", opt, "-fPIE", "-pie", "-pthread", path_str(&src), "-o", path_str(&out)];
            tool("clang++", &args);
            out
        }
    }
}

/// `b` in file names: `pie-O2`, `noplt-O2`, `clang-O2`.
fn tag(b: Build) -> String {
    match b {
        Build::Std(v) => v.name().to_string(),
        Build::NoPlt(o) => format!("noplt{o}"),
        Build::Clang(o) => format!("clang{o}"),
    }
}

/// `name` built as `b`, rewritten with `spec` (`None`: the default spec) and run next to the
/// original.
fn run_case(name: &str, b: Build, args: &[&str], spec: Option<&str>) -> Case {
    let _share = cpu_share();
    let bin = build_prog(name, b);
    let label = format!("imports-{name}-{}", tag(b)) + if spec.is_some() { "-spec" } else { "" };
    let dir = fresh_dir(&label);
    let out = dir.join("out").join(name);
    match spec {
        None => rewrite(&bin, &out),
        Some(text) => {
            let file = dir.join("spec.yaml");
            std::fs::write(&file, text).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
            std::fs::create_dir_all(dir.join("out")).unwrap();
            let o = stint(&["rewrite", path_str(&bin), "-o", path_str(&out), "--spec", path_str(&file), "-q"]);
            assert!(o.status == 0, "{label}: stint rewrite --spec: {o:?}");
        }
    }
    let profiles = dir.join("profiles");
    std::fs::create_dir_all(&profiles).unwrap();
    let original = Run::new(&bin, &dir).args(args).timeout(RUN_TIMEOUT).run();
    let rewritten = Run::new(&out, &dir)
        .args(args)
        .env(stint_layout::ENV_PROFILE, &profile_template(&profiles, name))
        .timeout(RUN_TIMEOUT)
        .run();
    let file = profiles.join(format!("{name}.{}.stint", rewritten.pid));
    assert!(file.is_file(), "{label}: no profile {}: {:?}", file.display(), dir_entries(&profiles));
    let report = report_json(&file);
    let bad = report_invariants(&report, name, rewritten.pid, false);
    assert!(bad.is_empty(), "{label}: report:\n  {}", bad.join("\n  "));
    let meta = meta_of(&file);
    let text = stint(&["report", path_str(&file)]);
    assert!(text.status == 0, "{label}: stint report: {text:?}");
    Case { original, rewritten, report, report_text: text.stdout_str(), inspect: inspect_json(&bin), meta, out }
}

/// The meta JSON a profile file carries (`stint-meta/1`): the bytes from `{"schema":"stint-meta`
/// to the matching end of the object.
fn meta_of(file: &Path) -> Value {
    let bytes = std::fs::read(file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    let key = b"{\"schema\":\"stint-meta/1\"";
    let start = bytes.windows(key.len()).position(|w| w == key).expect("the profile carries its meta");
    let mut de = serde_json::Deserializer::from_slice(&bytes[start..]).into_iter::<Value>();
    de.next().expect("one meta object").expect("the meta parses")
}

fn imports_case(b: Build) -> Arc<Case> {
    static CASES: RunCache<Build, Case> = OnceLock::new();
    cached_run(&CASES, b, &format!("imports {b:?}"), || run_case("imports", b, &["2", "1000"], None))
}

fn calls_only_case(b: Build) -> Arc<Case> {
    static CASES: RunCache<Build, Case> = OnceLock::new();
    cached_run(&CASES, b, &format!("imports calls-only {b:?}"), || {
        run_case("imports", b, &["2", "1000"], Some(CALLS_ONLY))
    })
}

fn eh_case(b: Build) -> Arc<Case> {
    static CASES: RunCache<Build, Case> = OnceLock::new();
    cached_run(&CASES, b, &format!("imports_eh {b:?}"), || run_case("imports_eh", b, &[], None))
}

use crate::common::function_row as func;

fn num(f: &Value, key: &str) -> u64 {
    f.get(key).and_then(Value::as_u64).unwrap_or(0)
}

fn workers(r: &Value) -> Vec<&Value> {
    // `first_function`: the worker's entry is its first event (with or without -fno-plt,
    // whose pthread_create call sites lead to the wrapper too).
    threads(r).iter().filter(|t| t.get("first_function").and_then(Value::as_str) == Some("worker")).collect()
}

fn assert_same(c: &Case, what: &str) {
    assert!(c.original.status == 0, "{what}: the original fails: {:?}", c.original);
    assert!(
        c.original.same_behaviour(&c.rewritten),
        "{what}: the rewritten program behaves differently\n{}",
        describe_difference("original", &c.original, "rewritten", &c.rewritten)
    );
}

fn check_calls(b: Build) {
    let c = imports_case(b);
    let what = format!("imports {b:?}");
    assert_same(&c, &what);
    let ws = workers(&c.report);
    assert_eq!(ws.len() as u64, WORKERS, "{what}: worker threads in {}", c.report);
    for t in ws {
        let strlen = func(t, "strlen").unwrap_or_else(|| panic!("{what}: no strlen on a worker: {t}"));
        assert_eq!(num(strlen, "calls"), STRLEN_CALLS, "{what}: strlen calls on a worker: {t}");
        assert!(strlen.get("wall_ns").is_some_and(Value::is_u64), "{what}: strlen is not timed: {strlen}");
        let qsort = func(t, "qsort").unwrap_or_else(|| panic!("{what}: no qsort on a worker: {t}"));
        assert_eq!(num(qsort, "calls"), QSORT_CALLS, "{what}: qsort calls on a worker: {t}");
        // The callback runs inside qsort: its time is part of qsort's.
        let cb = func(t, "by_value").unwrap_or_else(|| panic!("{what}: no by_value on a worker: {t}"));
        assert!(num(cb, "calls") >= QSORT_CALLS, "{what}: by_value calls: {cb}");
        assert!(num(qsort, "wall_ns") >= num(cb, "wall_ns"), "{what}: qsort {qsort} shorter than its callback {cb}");
    }
    let main = main_thread(&c.report);
    assert!(func(main, "strlen").is_none(), "{what}: strlen on the main thread: {main}");
}

mod calls {
    use super::*;
    #[test]
    fn pie_o0() {
        check_calls(Build::Std(Variant::PieO0));
    }
    #[test]
    fn pie_o2() {
        check_calls(Build::Std(Variant::PieO2));
    }
    #[test]
    fn nopie_o2() {
        check_calls(Build::Std(Variant::NopieO2));
    }
    #[test]
    fn fno_plt_o0() {
        check_calls(Build::NoPlt("-O0"));
    }
    #[test]
    fn fno_plt_o2() {
        check_calls(Build::NoPlt("-O2"));
    }
}

fn check_calls_only(b: Build) {
    let c = calls_only_case(b);
    let what = format!("imports calls-only {b:?}");
    assert_same(&c, &what);
    let ws = workers(&c.report);
    assert_eq!(ws.len() as u64, WORKERS, "{what}: worker threads in {}", c.report);
    for t in ws {
        let strlen = func(t, "strlen").unwrap_or_else(|| panic!("{what}: no strlen on a worker: {t}"));
        assert_eq!(num(strlen, "calls"), STRLEN_CALLS, "{what}: strlen calls on a worker: {t}");
        assert_eq!(num(strlen, "wall_ns"), 0, "{what}: strlen is timed with calls only: {strlen}");
        let qsort = func(t, "qsort").unwrap_or_else(|| panic!("{what}: no qsort on a worker: {t}"));
        assert_eq!(num(qsort, "calls"), QSORT_CALLS, "{what}: qsort calls on a worker: {t}");
    }
    let main = main_thread(&c.report);
    assert!(func(main, "strlen").is_none(), "{what}: strlen on the main thread: {main}");
    for t in threads(&c.report) {
        assert_eq!(t["clock_source"], "clock_gettime", "{what}: a thread of a program without timers: {t}");
    }
}

mod calls_only {
    use super::*;
    #[test]
    fn pie_o2() {
        check_calls_only(Build::Std(Variant::PieO2));
    }
    #[test]
    fn nopie_o2() {
        check_calls_only(Build::Std(Variant::NopieO2));
    }
    #[test]
    fn fno_plt_o2() {
        check_calls_only(Build::NoPlt("-O2"));
    }
}

/// Every patched import call site of `c`'s output, disassembled: `nop`s, then a `call`
/// that ends where the program's call ended.
fn check_call_patches(c: &Case, what: &str) {
    let points = c.inspect["points"].as_array().expect("points");
    let sites: Vec<(u64, u64)> = points
        .iter()
        .filter(|p| p["kind"] == "import" && p["tactic"] == "window")
        .map(|p| {
            let hex = |v: &Value| u64::from_str_radix(v.as_str().unwrap_or("").trim_start_matches("0x"), 16);
            (hex(&p["site"]).expect("site"), p["window"].as_u64().expect("window"))
        })
        .collect();
    assert!(sites.len() >= 3, "{what}: patched import sites {sites:?}");
    for &(site, len) in &sites {
        let o = std::process::Command::new("objdump")
            .args(["-d", "--no-show-raw-insn", &format!("--start-address=0x{site:x}")])
            .arg(format!("--stop-address=0x{:x}", site + len))
            .arg(&c.out)
            .output()
            .expect("objdump (binutils)");
        let text = String::from_utf8_lossy(&o.stdout);
        let ins: Vec<(u64, &str)> = text
            .lines()
            .filter_map(|l| {
                let (addr, rest) = l.trim_start().split_once(":\t")?;
                Some((u64::from_str_radix(addr, 16).ok()?, rest.split_whitespace().next()?))
            })
            .collect();
        let Some((&(call_at, last), nops)) = ins.split_last() else { panic!("{what}: 0x{site:x}: {text}") };
        assert_eq!((call_at, last), (site + len - 5, "call"), "{what}: 0x{site:x}+{len}:\n{text}");
        assert!(nops.iter().all(|(_, m)| *m == "nop") && nops.len() as u64 == len - 5, "{what}: 0x{site:x}:\n{text}");
    }
}

mod call_patches {
    use super::*;
    #[test]
    fn pie_o2() {
        check_call_patches(&imports_case(Build::Std(Variant::PieO2)), "imports pie-O2");
    }
    #[test]
    fn fno_plt_o2() {
        check_call_patches(&imports_case(Build::NoPlt("-O2")), "imports -fno-plt -O2");
    }
}

fn check_usleep(b: Build) {
    let c = imports_case(b);
    let what = format!("imports {b:?}");
    assert_same(&c, &what);
    let main = main_thread(&c.report);
    let usleep = func(main, "usleep").unwrap_or_else(|| panic!("{what}: no usleep on main: {main}"));
    let n = num(usleep, "calls");
    assert!((1..=2).contains(&n), "{what}: usleep calls on main: {usleep}");
    assert!(num(usleep, "wall_ns") >= n * USLEEP_NS, "{what}: usleep wall time below {n} x 300 ms: {usleep}");
    // nap (`jmp usleep@plt` at -O2): its frame stays open until usleep returns (D17).
    let nap = func(main, "nap").unwrap_or_else(|| panic!("{what}: no nap on main: {main}"));
    assert_eq!(num(nap, "calls"), 1, "{what}: nap: {nap}");
    let tail = |f: &str| {
        c.inspect["points"]
            .as_array()
            .expect("points")
            .iter()
            .find(|p| p["kind"] == "exit" && p["function"] == f && p["exit"] == "tail_jump")
            .cloned()
    };
    let marked = |f: &str| {
        c.meta["points"]
            .as_array()
            .expect("meta points")
            .iter()
            .find(|p| p["function"] == f)
            .and_then(|p| p.get("tail_jumps_to").cloned())
    };
    match tail("nap") {
        Some(x) => {
            assert_eq!(x["tactic"], "window", "{what}: {x}");
            assert_eq!(x["note"], "frame kept open across tail jump to usleep", "{what}: {x}");
            assert!(num(nap, "wall_ns") >= USLEEP_NS, "{what}: nap ends before usleep returns: {nap}");
            assert_eq!(n, 1, "{what}: usleep reached by the tail jump is nap's time, no call of its own: {usleep}");
        }
        None => {
            // A call (at -O0): usleep is a call of its own, and nap's time includes it if nap
            // is timed (its `leave; ret` exit needs --traps at -O0).
            assert_eq!(n, 2, "{what}: {usleep}");
            assert!(num(nap, "wall_ns") >= USLEEP_NS || nap["wall_ns"].is_null(), "{what}: nap: {nap}");
        }
    }
    assert_eq!(marked("nap"), None, "{what}: nap marked");
    // lookup (`jmp getenv@plt` at -O2): getenv is not known to take its arguments in
    // registers only, so lookup's time ends at the jump, and the profile and report say so.
    match tail("lookup") {
        Some(x) => {
            assert_eq!(x["note"], "time ends at tail jump to getenv", "{what}: {x}");
            assert_eq!(marked("lookup"), Some(serde_json::json!(["getenv"])), "{what}");
            assert!(
                c.report_text.contains("\nlookup: time ends at tail jump to getenv\n"),
                "{what}: {}",
                c.report_text
            );
        }
        None => assert_eq!(marked("lookup"), None, "{what}"),
    }
}

mod usleep {
    use super::*;
    #[test]
    fn pie_o0() {
        check_usleep(Build::Std(Variant::PieO0));
    }
    #[test]
    fn pie_o2() {
        check_usleep(Build::Std(Variant::PieO2));
    }
    #[test]
    fn fno_plt_o2() {
        check_usleep(Build::NoPlt("-O2"));
    }
}

#[test]
fn inspect_lists_import_sites() {
    let c = imports_case(Build::Std(Variant::PieO2));
    let points = c.inspect["points"].as_array().expect("points");
    let imports: Vec<&Value> = points.iter().filter(|p| p["kind"] == "import").collect();
    let strlen: Vec<&&Value> = imports.iter().filter(|p| p["function"] == "strlen").collect();
    assert_eq!(strlen.len(), 1, "one strlen call site: {imports:?}");
    assert_eq!(strlen[0]["caller"], "worker", "{imports:?}");
    assert_eq!(strlen[0]["tactic"], "window", "{imports:?}");
    for wrapped in ["pthread_create", "pthread_join"] {
        let row =
            imports.iter().find(|p| p["function"] == wrapped).unwrap_or_else(|| panic!("no {wrapped}: {imports:?}"));
        assert_eq!(row["tactic"], "skipped", "{row}");
        assert_eq!(row["reason"], "thread-library function with a wrapper", "{row}");
    }
    let s = &c.inspect["summary"];
    let patched = imports.iter().filter(|p| p["tactic"] != "skipped").count() as u64;
    assert_eq!(s["import_sites_patched"].as_u64(), Some(patched), "{s}");
    assert_eq!(s["import_sites"].as_u64(), Some(imports.len() as u64), "{s}");
    // strlen, qsort, usleep, printf (or puts): one point each.
    let names: std::collections::BTreeSet<&str> =
        imports.iter().filter(|p| p["tactic"] != "skipped").filter_map(|p| p["function"].as_str()).collect();
    assert_eq!(s["imports"].as_u64(), Some(names.len() as u64), "{s} {names:?}");
    let kinds: Vec<&Value> =
        c.meta["points"].as_array().expect("meta points").iter().filter(|p| p["kind"] == "import").collect();
    assert_eq!(kinds.len(), names.len(), "meta import points {kinds:?}");
}

/// The import call site in `caller` of imports_eh, from `stint inspect`.
fn eh_site<'a>(c: &'a Case, what: &str, caller: &str, import: &str) -> &'a Value {
    let points = c.inspect["points"].as_array().expect("points");
    points
        .iter()
        .find(|p| p["kind"] == "import" && p["function"] == import && p["caller"] == caller)
        .unwrap_or_else(|| panic!("{what}: no {import} call in {caller}: {points:?}"))
}

/// The calls main's row of the import called at `site` counts (the row with the import's
/// address), and whether it is timed; the calls it must count: one per call of each function
/// whose call into the same import is patched (each calls it once per call).
fn import_calls(c: &Case, what: &str, site: &Value) -> (u64, u64) {
    let main = main_thread(&c.report);
    let rows = main["functions"].as_array().expect("functions");
    let row = rows
        .iter()
        .find(|f| f["address"] == site["address"])
        .unwrap_or_else(|| panic!("{what}: no row for {site} on main: {main}"));
    assert!(row.get("wall_ns").is_some_and(Value::is_u64), "{what}: {} is not timed: {row}", site["function"]);
    let points = c.inspect["points"].as_array().expect("points");
    let want = points
        .iter()
        .filter(|p| p["kind"] == "import" && p["address"] == site["address"] && p["tactic"] != "skipped")
        .map(|p| {
            let caller = p["caller"].as_str().expect("caller");
            func(main, caller).map_or(0, |f| num(f, "calls"))
        })
        .sum();
    (num(row, "calls"), want)
}

fn check_exception(b: Build) {
    let c = eh_case(b);
    let what = format!("imports_eh {}", tag(b));
    assert_same(&c, &what);
    assert!(c.original.stdout_str().contains("grab: caught 1\n"), "{what}: {:?}", c.original.stdout_str());
    assert!(
        c.original.stdout_str().contains("cleaned: caught 1, tallied 3\n"),
        "{what}: {:?}",
        c.original.stdout_str()
    );
    for caller in ["grab", "cleaned", "must"] {
        let site = eh_site(&c, &what, caller, "operator new");
        assert_eq!(site["tactic"], "window", "{what}: {caller}'s call into operator new is patched");
    }
    // Three calls each through grab's and cleaned's sites, one of each threw through the
    // trampoline while timed.
    let main = main_thread(&c.report);
    assert_eq!(num(func(main, "grab").expect("grab"), "calls"), 3, "{what}: {main}");
    assert_eq!(num(func(main, "cleaned").expect("cleaned"), "calls"), 3, "{what}: {main}");
    let (got, want) = import_calls(&c, &what, eh_site(&c, &what, "grab", "operator new"));
    assert_eq!(got, want, "{what}: operator new calls: {main}");
}

/// A site of `caller` under a handler that catches (into `import`) is patched, the program
/// prints `line` as the original does, `caller` was called `calls` times and the import's row
/// counts every call of its patched sites, timed.
fn check_catch(b: Build, caller: &str, import: &str, line: &str, calls: u64) {
    let c = eh_case(b);
    let what = format!("imports_eh {} {caller}", tag(b));
    assert_same(&c, &what);
    let out = c.rewritten.stdout_str();
    assert!(out.contains(line), "{what}: want {line:?} in {out:?}");
    let site = eh_site(&c, &what, caller, import);
    assert_eq!(site["tactic"], "window", "{what}: the call under the catch is patched: {site}");
    let main = main_thread(&c.report);
    let f = func(main, caller).unwrap_or_else(|| panic!("{what}: no {caller} on main: {main}"));
    assert_eq!(num(f, "calls"), calls, "{what}: {f}");
    let (got, want) = import_calls(&c, &what, site);
    assert!(want >= calls, "{what}: {want} calls expected of {import}");
    assert_eq!(got, want, "{what}: {import} calls: {main}");
}

/// The handler of guarded's row catches the bad_alloc thrown in the timed operator new.
fn check_catch_matches(b: Build) {
    check_catch(b, "guarded", "operator new", "guarded: 0 1\n", 2);
}

/// A bad_alloc does not match mismatched's catch of std::length_error: it reaches main's.
fn check_catch_mismatch(b: Build) {
    check_catch(b, "mismatched", "operator new[]", "mismatched: returned 0, caught 1\n", 3);
}

/// rethrown's handler runs once and its `throw;` reaches main's catch.
fn check_catch_rethrow(b: Build) {
    check_catch(b, "rethrown", "operator new", "rethrown: returned 0, caught 1, rethrown 1\n", 3);
}

/// catch (...) (a null type-table entry) catches there.
fn check_catch_all(b: Build) {
    check_catch(b, "anything", "operator new[]", "anything: 0 4\n", 2);
}

macro_rules! per_build {
    ($name:ident, $check:ident) => {
        mod $name {
            use super::*;
            #[test]
            fn pie_o2() {
                $check(Build::Std(Variant::PieO2));
            }
            #[test]
            fn pie_o0() {
                $check(Build::Std(Variant::PieO0));
            }
            #[test]
            fn nopie_o2() {
                $check(Build::Std(Variant::NopieO2));
            }
            #[test]
            fn clang_o2() {
                $check(Build::Clang("-O2"));
            }
            #[test]
            fn clang_o0() {
                $check(Build::Clang("-O0"));
            }
        }
    };
}

per_build!(catch_matches, check_catch_matches);
per_build!(catch_mismatch_propagates, check_catch_mismatch);
per_build!(catch_rethrows, check_catch_rethrow);
per_build!(catch_all, check_catch_all);
per_build!(exception, check_exception);
per_build!(noexcept_terminates, check_noexcept);

fn check_noexcept(b: Build) {
    let c = eh_case(b);
    let what = format!("imports_eh {} terminate", tag(b));
    let bin = build_prog("imports_eh", b);
    let dir = fresh_dir(&format!("imports-eh-terminate-{}", tag(b)));
    let original = Run::new(&bin, &dir).args(["terminate"]).timeout(RUN_TIMEOUT).run();
    assert_eq!(original.signal, Some(libc::SIGABRT), "{what}: the original: {original:?}");
    assert!(original.stderr_str().contains("terminate called after throwing"), "{what}: {original:?}");
    let site = eh_site(&c, &what, "must", "operator new");
    assert_eq!(site["tactic"], "window", "{what}: must's call into operator new is patched: {site}");
    let rewritten = Run::new(&c.out, &dir)
        .args(["terminate"])
        .env(stint_layout::ENV_PROFILE, &profile_template(&dir, "imports_eh"))
        .timeout(RUN_TIMEOUT)
        .run();
    assert!(
        original.same_behaviour(&rewritten),
        "{what}: the rewritten program behaves differently\n{}",
        describe_difference("original", &original, "rewritten", &rewritten)
    );
}

fn check_cancel(v: Variant) {
    let c = eh_case(Build::Std(v));
    let what = format!("imports_eh {v}");
    assert_same(&c, &what);
    let out = c.rewritten.stdout_str();
    assert!(out.contains("sleeper unwound\n") && out.contains("sleeper cancelled\n"), "{what}: {out:?}");
    let points = c.inspect["points"].as_array().expect("points");
    let doze = points
        .iter()
        .find(|p| p["kind"] == "import" && p["function"] == "usleep" && p["caller"] == "doze")
        .unwrap_or_else(|| panic!("{what}: no usleep call in doze: {points:?}"));
    assert_eq!(doze["tactic"], "window", "{what}: {doze}");
    let sleeper = threads(&c.report)
        .iter()
        .find(|t| t["start_routine"] == "sleeper")
        .unwrap_or_else(|| panic!("{what}: no sleeper thread: {}", c.report));
    assert_eq!(sleeper["exit"], "canceled", "{what}: {sleeper}");
    let usleep = func(sleeper, "usleep").unwrap_or_else(|| panic!("{what}: no usleep on sleeper: {sleeper}"));
    assert!(num(usleep, "calls") >= 1, "{what}: {usleep}");
    let doze_row = func(sleeper, "doze").expect("doze");
    assert_eq!(num(doze_row, "calls"), num(usleep, "calls"), "{what}: one usleep per doze: {sleeper}");
}

#[test]
fn cancel_pie_o2() {
    check_cancel(Variant::PieO2);
}

#[test]
fn cancel_pie_o0() {
    check_cancel(Variant::PieO0);
}

/// pigz -p 2 rewritten with the default spec compresses exactly like the original, and
/// `deflate` (libz) appears on its compression threads with calls and time.
#[test]
fn pigz_deflate_under_compression_threads() {
    let Some(pigz) = crate::debian::debian_binary("/usr/bin/pigz", "pigz") else { return };
    let _share = cpu_share();
    let pigz_st = crate::debian::rewritten(&pigz);
    let input = crate::debian::big_text();
    let (_, _, report) = crate::debian::compare("pigz", &pigz, &pigz_st, &["-p", "2", "-c", path_str(input)], None);
    let compressing: Vec<&Value> = threads(&report).iter().filter(|t| func(t, "deflate").is_some()).collect();
    assert!(compressing.len() >= 2, "pigz -p 2: {} threads call deflate, want 2 or more: {report}", compressing.len());
    for t in compressing {
        assert_ne!(t["main"], true, "deflate on the main thread: {t}");
        let d = func(t, "deflate").expect("deflate");
        assert!(num(d, "calls") > 0 && num(d, "cpu_ns") > 0 && num(d, "wall_ns") > 0, "deflate not timed: {d}");
    }
}
