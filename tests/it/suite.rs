//! A test suite in CI, end to end (issue 10): eleven test executables built here (ten
//! `testbins/` programs and a small one written below), rewritten with one `stint batch`, run
//! twice as a suite runner would (with `STINT_DIR`, no `STINT_PROFILE`), merged with `stint
//! merge`, and gated with `stint diff`:
//!
//! | test | what it checks |
//! | --- | --- |
//! | `same_suite_passes_the_exact_gate` | two runs of the suite: `--metric calls --threshold 0` exits 0 |
//! | `suite_matches_the_checked_in_baseline` | the merged calls per `program: function` equal `snapshots/suite_calls.snap` |
//! | `one_more_call_fails_the_gate_and_names_it` | the small program rebuilt to call `work` once more: exit 1, `suite_work: work` named |
//! | `noise_under_min_abs_passes` | wall times of two runs differ, `--threshold 5% --min-abs 1000` (ms) passes |
//!
//! The programs are the deterministic ones of `testbins/` (their call counts do not depend on
//! scheduling); the baseline is regenerated with
//! `INSTA_UPDATE=always cargo test --release --test it -- suite::` and reviewed like code.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use crate::common::*;

/// The deterministic testbins of the suite.
const PROGRAMS: &[&str] = &[
    "calltree",
    "forker",
    "recurse",
    "longjmp",
    "bench_calls",
    "matmul",
    "locks_counts",
    "locks_join",
    "locks_sem",
    "locks_barrier",
];

/// The small program of the suite: `work` is called `N` times, one more with `-DMORE`.
const SMALL: &str = "#include <stdio.h>\n\
    __attribute__((noinline)) int work(int x) { return x * 3 + 1; }\n\
    int main(void) { int s = 0; for (int i = 0; i < 100 + MORE; i++) s += work(i); printf(\"%d\\n\", s); return 0; }\n";

struct Suite {
    dir: PathBuf,
    /// Merged runs: base, the same suite again, and the suite with the regressed program.
    base: PathBuf,
    same: PathBuf,
    regressed: PathBuf,
}

fn small(dir: &Path, more: u32) -> PathBuf {
    let src = dir.join(format!("suite_work{more}.c"));
    std::fs::write(&src, SMALL).unwrap();
    let bin = dir.join(format!("m{more}")).join("suite_work");
    std::fs::create_dir_all(bin.parent().unwrap()).unwrap();
    tool("gcc", &["-O2", &format!("-DMORE={more}"), path_str(&src), "-o", path_str(&bin)]);
    bin
}

/// `stint batch` over `bins` (a directory) into `out`; every file rewritten.
fn batch(bins: &Path, out: &Path) {
    let o = stint(&["batch", path_str(bins), "-o", path_str(out)]);
    assert_eq!(o.status, 0, "stint batch: {o:?}");
}

/// Run every rewritten program of `rewritten` with its arguments, profiles into `profiles`,
/// then merge them into `merged`.
fn run_and_merge(dir: &Path, rewritten: &Path, profiles: &Path, merged: &Path) {
    // The runtime creates the profile directory itself (0700; a 0755 one would be refused).
    let cwd = dir.join("cwd");
    std::fs::create_dir_all(&cwd).unwrap();
    let mut names: Vec<&str> = PROGRAMS.to_vec();
    names.push("suite_work");
    for name in names {
        let args = if name == "suite_work" { Vec::new() } else { program(name).args };
        let exit = if name == "suite_work" { 0 } else { program(name).exit };
        let bin = rewritten.join(name);
        let o = Run::new(&bin, &cwd).args(&args).env("STINT_DIR", path_str(profiles)).run();
        assert_eq!(o.status, exit, "{name}: {o:?}");
        assert!(!o.stderr_str().contains("stint:"), "{name}: measured without a warning: {o:?}");
    }
    let o = stint(&["merge", path_str(profiles), "-o", path_str(merged), "-q"]);
    assert_eq!(o.status, 0, "stint merge: {o:?}");
}

fn suite() -> &'static Suite {
    static SUITE: OnceLock<Suite> = OnceLock::new();
    SUITE.get_or_init(|| {
        let _share = cpu_share();
        let dir = fresh_dir("suite");
        let bins = dir.join("bin");
        std::fs::create_dir_all(&bins).unwrap();
        for name in PROGRAMS {
            let built = build(&program(name), Variant::parse("pie-O2").unwrap());
            std::fs::copy(&built, bins.join(name)).unwrap();
        }
        std::fs::copy(small(&dir, 0), bins.join("suite_work")).unwrap();
        let rewritten = dir.join("rewritten");
        batch(&bins, &rewritten);
        let (base, same, regressed) = (dir.join("base.json"), dir.join("same.json"), dir.join("regressed.json"));
        run_and_merge(&dir, &rewritten, &dir.join("p-base"), &base);
        run_and_merge(&dir, &rewritten, &dir.join("p-same"), &same);
        // The regression: the small program rebuilt with one more call, rewritten alone.
        let more = dir.join("more-bin");
        std::fs::create_dir_all(&more).unwrap();
        std::fs::copy(small(&dir, 1), more.join("suite_work")).unwrap();
        let more_rw = dir.join("more-rewritten");
        batch(&more, &more_rw);
        let rw2 = dir.join("rewritten2");
        std::fs::create_dir_all(&rw2).unwrap();
        for e in std::fs::read_dir(&rewritten).unwrap() {
            let e = e.unwrap();
            std::fs::copy(e.path(), rw2.join(e.file_name())).unwrap();
        }
        std::fs::copy(more_rw.join("suite_work"), rw2.join("suite_work")).unwrap();
        run_and_merge(&dir, &rw2, &dir.join("p-regressed"), &regressed);
        Suite { dir, base, same, regressed }
    })
}

fn diff(base: &Path, new: &Path, extra: &[&str]) -> Outcome {
    let mut a = vec!["diff", path_str(base), path_str(new)];
    a.extend_from_slice(extra);
    stint(&a)
}

#[test]
fn same_suite_passes_the_exact_gate() {
    let s = suite();
    let o = diff(&s.base, &s.same, &["--metric", "calls", "--threshold", "0"]);
    assert_eq!(o.status, 0, "{}", o.stdout_str());
    assert!(o.stdout_str().contains("11 programs"), "the header names the suite: {}", o.stdout_str());
}

#[test]
fn suite_matches_the_checked_in_baseline() {
    let s = suite();
    let docs: Vec<serde_json::Value> = serde_json::from_slice(&std::fs::read(&s.base).unwrap()).unwrap();
    let mut lines = Vec::new();
    for d in &docs {
        let prog = d["program"].as_str().unwrap();
        let mut calls: std::collections::BTreeMap<String, u64> = Default::default();
        for t in d["threads"].as_array().unwrap() {
            for f in t["functions"].as_array().unwrap() {
                *calls.entry(f["name"].as_str().unwrap().to_string()).or_default() += f["calls"].as_u64().unwrap();
            }
        }
        for (f, c) in calls {
            lines.push(format!("{prog}: {f} {c}"));
        }
    }
    lines.sort();
    insta::with_settings!({snapshot_path => "snapshots", prepend_module_to_snapshot => false, omit_expression => true}, {
        insta::assert_snapshot!("suite_calls", lines.join("\n"));
    });
    let _ = &s.dir;
}

#[test]
fn one_more_call_fails_the_gate_and_names_it() {
    let s = suite();
    let o = diff(&s.base, &s.regressed, &["--metric", "calls", "--threshold", "0"]);
    assert_eq!(o.status, 1, "{o:?}");
    let out = o.stdout_str();
    // Rows read `BASE NEW CHANGE % STATUS FUNCTION`.
    let flagged: Vec<&str> = out.lines().filter(|l| l.split_whitespace().nth(4) == Some("REGRESSION")).collect();
    assert_eq!(flagged.len(), 1, "exactly one regressed row: {out}");
    assert!(flagged[0].contains("suite_work: work") && flagged[0].contains("+1"), "{out}");
    let md = diff(&s.base, &s.regressed, &["--metric", "calls", "--threshold", "0", "--format", "markdown"]);
    assert_eq!(md.status, 1);
    assert!(md.stdout_str().contains("suite_work: work"), "{}", md.stdout_str());
}

#[test]
fn noise_under_min_abs_passes() {
    let s = suite();
    let o = diff(&s.base, &s.same, &["--metric", "wall", "--threshold", "5%", "--min-abs", "1000"]);
    assert_eq!(o.status, 0, "{}", o.stdout_str());
}
