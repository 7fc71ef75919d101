//! `stint diff` on real runs: a C program the test writes (`work` called N times, `spin`
//! looping M times, both from its arguments), built once, rewritten once, run with
//! different arguments, and its profiles compared.
//!
//! | test | what it checks |
//! | --- | --- |
//! | `one_more_call_fails_the_exact_gate` | N=10 vs N=11, `--metric calls --threshold 0`: exit 1, the `work` row is `10 11 +1 … REGRESSION` and the summary names it |
//! | `same_arguments_pass_the_exact_gate` | two runs with the same arguments: exit 0, every change 0 |
//! | `without_threshold_only_prints` | the regressed pair without `--threshold`: exit 0, no `REGRESSION` |
//! | `json_report_is_an_input` | `stint report --format json` output (named `.stint`, a profile named `.json`: content decides) against a profile gives the same rows |
//! | `json_output_names_regressions` | `--format json`: schema, `regressions`, the `work` row's base/new/change |
//! | `timing_under_min_abs_passes` | M=1000 vs M=3000000, `--metric cpu --threshold 0`: exit 1 naming `spin`; with `--min-abs 10000` (ms) exit 0 |
//! | `markdown_is_a_table` | `--format markdown`: the table header and rule, the regression in bold |
//! | `threads_match_by_role` | `testbins/locks_mutex.c` run twice: `--by-thread --metric calls --threshold 0` passes with rows for the roles `main`, `holder`, `waiter` (tids differ); `--metric lock_wait --by-thread` has the waiter's wait on `mutex@holder` (over 100 ms of the 200 ms hold) in both runs |
//! | `bad_input_exits_2` | a missing file, garbage, a truncated profile, JSON of another schema, `--metric self`: exit 2, one line naming the file |

use crate::common::*;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

const SOURCE: &str = r#"#include <stdio.h>
#include <stdlib.h>
__attribute__((noipa)) long work(long x) { return x * 7 + 1; }
__attribute__((noipa)) long spin(long n) {
    volatile long s = 0;
    for (long i = 0; i < n; i++)
        s += i;
    return s;
}
int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 10, m = argc > 2 ? atol(argv[2]) : 1000, s = 0;
    for (long i = 0; i < n; i++)
        s += work(i);
    s += spin(m);
    printf("%ld\n", s);
    return 0;
}
"#;

/// The rewritten program and its directory, built once.
fn fixture() -> &'static (PathBuf, PathBuf) {
    static F: OnceLock<(PathBuf, PathBuf)> = OnceLock::new();
    F.get_or_init(|| {
        let _share = cpu_share();
        let dir = fresh_dir("diff");
        let src = dir.join("diffwork.c");
        std::fs::write(&src, SOURCE).unwrap();
        let bin = dir.join("diffwork");
        tool("gcc", &["-O2", "-Wall", "-Werror", path_str(&src), "-o", path_str(&bin)]);
        let out = dir.join("diffwork.stint");
        rewrite(&bin, &out);
        (dir, out)
    })
}

/// Run the rewritten program with `args`; its profile, named `name` in the fixture's
/// directory (any extension: diff reads the content).
fn profile(name: &str, args: &[&str]) -> PathBuf {
    let (dir, bin) = fixture();
    let path = dir.join(name);
    let _share = cpu_share();
    let o = Run::new(bin, dir).args(args).env("STINT_PROFILE", path_str(&path)).run();
    assert_eq!(o.status, 0, "{o:?}");
    assert!(path.is_file(), "no profile {}", path.display());
    path
}

fn diff(args: &[&str]) -> Outcome {
    let mut all = vec!["diff"];
    all.extend(args);
    stint(&all)
}

/// The table row whose last column is `name`, split at blanks.
fn row(out: &str, name: &str) -> Vec<String> {
    let line = out
        .lines()
        .find(|l| l.split_whitespace().last() == Some(name))
        .unwrap_or_else(|| panic!("no row {name}:\n{out}"));
    line.split_whitespace().map(String::from).collect()
}

fn p(path: &Path) -> &str {
    path_str(path)
}

#[test]
fn one_more_call_fails_the_exact_gate() {
    let (a, b) = (profile("gate-a.stint", &["10"]), profile("gate-b.stint", &["11"]));
    let o = diff(&[p(&a), p(&b), "--metric", "calls", "--threshold", "0"]);
    assert_eq!(o.status, 1, "{o:?}");
    let out = o.stdout_str();
    assert_eq!(row(&out, "work"), ["10", "11", "+1", "+10.0%", "REGRESSION", "work"], "{out}");
    assert_eq!(row(&out, "spin")[..4], ["1", "1", "0", "+0.0%"], "{out}");
    let header = |side: &str, path: &Path| {
        out.lines().any(|l| l.starts_with(&format!("{side} diffwork pid ")) && l.ends_with(&format!("  {}", p(path))))
    };
    assert!(header("base:", &a) && header("new: ", &b), "{out}");
    assert!(out.trim_end().ends_with("1 REGRESSION: work"), "{out}");
    assert!(o.stderr.is_empty(), "{o:?}");
}

#[test]
fn same_arguments_pass_the_exact_gate() {
    let (a, b) = (profile("same-a.stint", &["10"]), profile("same-b.stint", &["10"]));
    let o = diff(&[p(&a), p(&b), "--metric", "calls", "--threshold", "0"]);
    assert_eq!(o.status, 0, "{o:?}");
    let out = o.stdout_str();
    for f in ["main", "work", "spin"] {
        assert_eq!(row(&out, f)[2], "0", "{out}");
    }
    assert!(out.contains("no regression") && !out.contains("REGRESSION"), "{out}");
}

#[test]
fn without_threshold_only_prints() {
    let (a, b) = (profile("print-a.stint", &["10"]), profile("print-b.stint", &["20"]));
    let o = diff(&[p(&a), p(&b), "--metric", "calls"]);
    assert_eq!(o.status, 0, "{o:?}");
    let out = o.stdout_str();
    assert_eq!(row(&out, "work")[..4], ["10", "20", "+10", "+100.0%"], "{out}");
    assert!(!out.contains("REGRESSION"), "{out}");
}

#[test]
fn json_report_is_an_input() {
    // A JSON report named .stint and a profile named .json: the content decides.
    let a = profile("json-a.json", &["10"]);
    let b = profile("json-b.stint", &["12"]);
    let report = fixture().0.join("json-a-report.stint");
    let r = stint(&["report", p(&a), "--format", "json"]);
    assert_eq!(r.status, 0, "{r:?}");
    std::fs::write(&report, &r.stdout).unwrap();
    let from_json = diff(&[p(&report), p(&b), "--metric", "calls"]);
    let from_profile = diff(&[p(&a), p(&b), "--metric", "calls"]);
    assert_eq!((from_json.status, from_profile.status), (0, 0), "{from_json:?}\n{from_profile:?}");
    assert_eq!(row(&from_json.stdout_str(), "work")[..3], ["10", "12", "+2"], "{from_json:?}");
    let rows =
        |o: &Outcome| o.stdout_str().lines().skip_while(|l| !l.starts_with("BASE")).collect::<Vec<_>>().join("\n");
    assert_eq!(rows(&from_json), rows(&from_profile));
}

#[test]
fn json_output_names_regressions() {
    let (a, b) = (profile("jout-a.stint", &["10"]), profile("jout-b.stint", &["13"]));
    let o = diff(&[p(&a), p(&b), "--metric", "calls", "--threshold", "5%", "--format", "json"]);
    assert_eq!(o.status, 1, "{o:?}");
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {o:?}"));
    assert_eq!(v["schema"], "stint-diff/1");
    assert_eq!(v["regressions"], serde_json::json!(["work"]));
    let work = v["rows"].as_array().unwrap().iter().find(|r| r["name"] == "work").unwrap();
    assert_eq!((&work["base"], &work["new"], &work["change"]), (&10.into(), &13.into(), &3.into()));
    assert_eq!(work["regression"], true);
    assert_eq!(v["gate"]["threshold_pct"], 5.0);
}

#[test]
fn timing_under_min_abs_passes() {
    let (a, b) = (profile("time-a.stint", &["10", "1000"]), profile("time-b.stint", &["10", "3000000"]));
    let strict = diff(&[p(&a), p(&b), "--metric", "cpu", "--threshold", "0"]);
    assert_eq!(strict.status, 1, "{strict:?}");
    assert_eq!(row(&strict.stdout_str(), "spin")[4], "REGRESSION", "{strict:?}");
    // 3 million loop turns are far below 10 s.
    let loose = diff(&[p(&a), p(&b), "--metric", "cpu", "--threshold", "0", "--min-abs", "10000"]);
    assert_eq!(loose.status, 0, "{loose:?}");
    assert!(loose.stdout_str().contains("no regression"), "{loose:?}");
}

#[test]
fn markdown_is_a_table() {
    let (a, b) = (profile("md-a.stint", &["10"]), profile("md-b.stint", &["11"]));
    let o = diff(&[p(&a), p(&b), "--metric", "calls", "--threshold", "0", "--format", "markdown"]);
    assert_eq!(o.status, 1, "{o:?}");
    let out = o.stdout_str();
    assert!(out.contains("| function | base | new | change | % | status |\n|---|--:|--:|--:|--:|---|\n"), "{out}");
    assert!(out.contains("| `work` | 10 | 11 | +1 | +10.0% | **REGRESSION** |"), "{out}");
}

#[test]
fn bad_input_exits_2() {
    let good = profile("bad-good.stint", &["10"]);
    let dir = &fixture().0;
    let missing = dir.join("no-such.stint");
    let garbage = dir.join("garbage.stint");
    std::fs::write(&garbage, "not a profile\n").unwrap();
    let truncated = dir.join("truncated.stint");
    std::fs::write(&truncated, &std::fs::read(&good).unwrap()[..64]).unwrap();
    let other = dir.join("other.json");
    std::fs::write(&other, r#"{"schema": "stint-diff/1", "rows": []}"#).unwrap();
    for (bad, want) in [
        (&missing, "cannot read"),
        (&garbage, "neither a profile file nor stint-profile/1 JSON"),
        (&truncated, ""),
        (&other, "schema \"stint-diff/1\""),
    ] {
        for args in [[p(&good), p(bad)], [p(bad), p(&good)]] {
            let o = diff(&[args[0], args[1], "--metric", "calls", "--threshold", "0"]);
            assert_eq!(o.status, 2, "{o:?}");
            let err = o.stderr_str();
            assert_eq!(err.lines().count(), 1, "{o:?}");
            assert!(err.starts_with(&format!("{}: ", p(bad))) && err.contains(want), "{o:?}");
            assert!(o.stdout.is_empty(), "{o:?}");
        }
    }
    let o = diff(&[p(&good), p(&good), "--metric", "self"]);
    assert_eq!(o.status, 2, "{o:?}");
    assert_eq!(o.stderr_str(), format!("{}: self times need call paths (not in this profile)\n", p(&good)));
}

#[test]
fn threads_match_by_role() {
    let (bin, dir) = {
        let _share = cpu_share();
        let built = build(&program("locks_mutex"), Variant::PieO2);
        let dir = fresh_dir("diff-threads");
        let bin = dir.join("locks_mutex.stint");
        rewrite(&built, &bin);
        (bin, dir)
    };
    let runs: Vec<PathBuf> = ["a.stint", "b.stint"]
        .iter()
        .map(|name| {
            let path = dir.join(name);
            let _share = cpu_share();
            let o = Run::new(&bin, &dir).env("STINT_PROFILE", p(&path)).run();
            assert_eq!(o.status, 0, "{o:?}");
            path
        })
        .collect();
    let o =
        diff(&[p(&runs[0]), p(&runs[1]), "--metric", "calls", "--by-thread", "--threshold", "0", "--format", "json"]);
    assert_eq!(o.status, 0, "{o:?}");
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let rows = v["rows"].as_array().unwrap();
    for (thread, function) in [("main", "main"), ("holder", "holder"), ("waiter", "waiter")] {
        let r = rows
            .iter()
            .find(|r| r["thread"] == thread && r["name"] == function)
            .unwrap_or_else(|| panic!("no row {thread}: {function}: {o:?}"));
        assert_eq!((&r["base"], &r["new"], &r["status"]), (&1.into(), &1.into(), &"both".into()), "{r}");
    }
    let o = diff(&[p(&runs[0]), p(&runs[1]), "--metric", "lock_wait", "--by-thread", "--format", "json"]);
    assert_eq!(o.status, 0, "{o:?}");
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let wait = v["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["thread"] == "waiter" && r["name"] == "mutex@holder")
        .unwrap_or_else(|| panic!("no waiter row on mutex@holder: {o:?}"));
    for side in ["base", "new"] {
        assert!(wait[side].as_u64().unwrap_or(0) > 100_000_000, "{wait}");
    }
}
