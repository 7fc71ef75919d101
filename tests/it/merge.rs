//! `stint merge` and `stint report` over several files: real runs of testbins summed per
//! program, exactly.
//!
//! | test | what it checks |
//! | --- | --- |
//! | `three_runs_sum_exactly` | calltree run 3 times: every function's calls in the merge are exactly 3× one run's; `runs` = 3, `merged_from` the 3 files |
//! | `forked_child_merges_with_parent` | forker's parent and child profiles: `g` = parent's + child's calls (7 + 5), `runs` = 2 |
//! | `threads_merge_by_role` | locks_join (6 threads: named, unnamed with start routines, one that inherits its creator's name) run twice: 6 merged threads, each with the calls of its role summed; its table has 6 too |
//! | `report_of_several_files_is_the_merge_table` | `stint report a b c` prints what `stint report merged.json` prints, and the directory form too |
//! | `merged_json_is_read_by_report_json` | `stint report merged.json --format json` gives back the merged document |
//! | `two_programs_give_an_array` | calltree and forker runs merged: a JSON array, one document per program |
//! | `missing_file_exits_2_naming_it` | a missing input: exit 2, one line naming it, no output file |
//! | `garbage_file_exits_2_naming_it` | a file that is neither a profile nor JSON: exit 2, one line naming it, no output file |

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use crate::common::*;

/// Build `name` (pie-O0), rewrite it, and run it `n` times in `dir` with `STINT_PROFILE`
/// per run; the profile files, sorted.
fn runs_of(name: &str, dir: &Path, n: usize) -> Vec<PathBuf> {
    let p = program(name);
    let bin = build(&p, Variant::PieO0);
    let out = dir.join("bin").join(name);
    rewrite(&bin, &out);
    let profiles = dir.join("runs");
    std::fs::create_dir_all(&profiles).unwrap();
    for _ in 0..n {
        let o = Run::new(&out, dir).args(&p.args).env("STINT_PROFILE", &profile_template(&profiles, name)).run();
        assert!(o.signal.is_none(), "{name}: {o:?}");
    }
    let mut files: Vec<PathBuf> = dir_entries(&profiles)
        .into_iter()
        .filter(|f| f.starts_with(&format!("{name}.")))
        .map(|f| profiles.join(f))
        .collect();
    files.sort();
    files
}

/// calltree run three times, once for the whole module: (dir, profiles).
fn calltree_runs() -> &'static (PathBuf, Vec<PathBuf>) {
    static RUNS: OnceLock<(PathBuf, Vec<PathBuf>)> = OnceLock::new();
    RUNS.get_or_init(|| {
        let _share = cpu_share();
        let dir = fresh_dir("merge-calltree");
        let files = runs_of("calltree", &dir, 3);
        assert_eq!(files.len(), 3, "{files:?}");
        (dir, files)
    })
}

fn strs(files: &[PathBuf]) -> Vec<&str> {
    files.iter().map(|f| path_str(f)).collect()
}

/// `stint merge FILES -o OUT -q`, which must succeed; the document, parsed.
fn merge_ok(files: &[&str], out: &Path) -> serde_json::Value {
    let mut args = vec!["merge"];
    args.extend_from_slice(files);
    args.extend(["-o", path_str(out), "-q"]);
    let o = stint(&args);
    assert!(o.status == 0 && o.stderr.is_empty(), "stint {args:?}: {o:?}");
    let text = std::fs::read_to_string(out).unwrap();
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: not JSON ({e})", out.display()))
}

/// Calls per function name, summed over the document's threads.
fn calls_by_name(doc: &serde_json::Value) -> BTreeMap<String, u64> {
    let mut m = BTreeMap::new();
    for t in doc["threads"].as_array().unwrap() {
        for f in t["functions"].as_array().unwrap() {
            *m.entry(f["name"].as_str().unwrap().to_owned()).or_default() += f["calls"].as_u64().unwrap();
        }
    }
    m
}

#[test]
fn three_runs_sum_exactly() {
    let (dir, files) = calltree_runs();
    let doc = merge_ok(&strs(files), &dir.join("three.json"));
    assert_eq!(doc["runs"], 3);
    assert_eq!(doc["merged_from"].as_array().unwrap().len(), 3);
    let one = calls_by_name(&report_json(&files[0]));
    assert!(one.get("leaf") == Some(&60), "one run of calltree: {one:?}");
    let want: BTreeMap<String, u64> = one.iter().map(|(k, v)| (k.clone(), 3 * v)).collect();
    assert_eq!(calls_by_name(&doc), want);
    assert_eq!(doc["threads"].as_array().unwrap().len(), 1);
    assert_eq!(doc["threads"][0]["tid"], 0);
}

#[test]
fn forked_child_merges_with_parent() {
    let _share = cpu_share();
    let dir = fresh_dir("merge-forker");
    let files = runs_of("forker", &dir, 1);
    assert_eq!(files.len(), 2, "parent and child: {files:?}");
    let children: Vec<bool> = files.iter().map(|f| report_json(f)["fork_child"].as_bool().unwrap()).collect();
    assert_eq!(children.iter().filter(|c| **c).count(), 1, "{files:?}");
    let doc = merge_ok(&strs(&files), &dir.join("tree.json"));
    assert_eq!(doc["runs"], 2);
    assert_eq!(calls_by_name(&doc).get("g"), Some(&(7 + 5)));
    assert_eq!(calls_by_name(&doc).get("main"), Some(&1));
}

/// Calls per function of the thread that plays `role` (main, or its start routine).
fn role_calls(doc: &serde_json::Value, main: bool, routine: Option<&str>) -> BTreeMap<String, u64> {
    let mut m = BTreeMap::new();
    for t in doc["threads"].as_array().unwrap() {
        if t["main"].as_bool() == Some(main) && t["start_routine"].as_str() == routine {
            for f in t["functions"].as_array().unwrap() {
                *m.entry(f["name"].as_str().unwrap().to_owned()).or_default() += f["calls"].as_u64().unwrap();
            }
        }
    }
    m
}

#[test]
fn threads_merge_by_role() {
    let _share = cpu_share();
    let dir = fresh_dir("merge-threads");
    let p = program("locks_join");
    let bin = build(&p, p.variants[0]);
    let out = dir.join("bin").join("locks_join");
    rewrite(&bin, &out);
    let profiles = dir.join("runs");
    std::fs::create_dir_all(&profiles).unwrap();
    for _ in 0..2 {
        let o = Run::new(&out, &dir).env("STINT_PROFILE", &profile_template(&profiles, "locks_join")).run();
        assert!(o.status == 0, "{o:?}");
    }
    let files: Vec<PathBuf> = dir_entries(&profiles).into_iter().map(|f| profiles.join(f)).collect();
    assert_eq!(files.len(), 2, "{files:?}");
    let runs: Vec<serde_json::Value> = files.iter().map(|f| report_json(f)).collect();
    let doc = merge_ok(&strs(&files), &dir.join("merged.json"));
    let threads = doc["threads"].as_array().unwrap();
    assert_eq!(threads.len(), 6, "{doc:#}");
    for t in threads {
        let (main, routine) = (t["main"].as_bool().unwrap(), t["start_routine"].as_str());
        let mut want = BTreeMap::new();
        for r in &runs {
            for (k, v) in role_calls(r, main, routine) {
                *want.entry(k).or_default() += v;
            }
        }
        assert!(!want.is_empty(), "{routine:?}: no calls in the runs");
        assert_eq!(role_calls(&doc, main, routine), want, "thread main={main} start_routine={routine:?}");
    }
    // The table of the merged document keeps the six roles.
    let o = stint(&["report", path_str(&dir.join("merged.json"))]);
    let headings = o.stdout_str().lines().filter(|l| l.starts_with("thread")).count();
    assert_eq!(headings, 6, "{}", o.stdout_str());
}

#[test]
fn report_of_several_files_is_the_merge_table() {
    let (dir, files) = calltree_runs();
    let merged = dir.join("for-report.json");
    merge_ok(&strs(files), &merged);
    let mut args = vec!["report"];
    args.extend(strs(files));
    let several = stint(&args);
    assert!(several.status == 0, "{several:?}");
    let of_merge = stint(&["report", path_str(&merged)]);
    assert!(of_merge.status == 0, "{of_merge:?}");
    assert_eq!(several.stdout_str(), of_merge.stdout_str());
    assert!(several.stdout_str().starts_with("program calltree  runs 3  threads 1\n"), "{}", several.stdout_str());
    let of_dir = stint(&["report", path_str(&dir.join("runs"))]);
    assert_eq!(of_dir.stdout_str(), several.stdout_str());
}

#[test]
fn merged_json_is_read_by_report_json() {
    let (dir, files) = calltree_runs();
    let merged = dir.join("for-json.json");
    let doc = merge_ok(&strs(files), &merged);
    assert_eq!(report_json(&merged), doc);
}

#[test]
fn two_programs_give_an_array() {
    let (dir, files) = calltree_runs();
    let _share = cpu_share();
    let fdir = fresh_dir("merge-two");
    let forks = runs_of("forker", &fdir, 1);
    let mut inputs = strs(files);
    inputs.extend(strs(&forks));
    let doc = merge_ok(&inputs, &dir.join("two.json"));
    let got: Vec<(&str, u64)> =
        doc.as_array().unwrap().iter().map(|d| (d["program"].as_str().unwrap(), d["runs"].as_u64().unwrap())).collect();
    assert_eq!(got, [("calltree", 3), ("forker", 2)]);
}

/// `stint merge` with a bad input: exit 2, one stderr line starting with the input's path,
/// and no output file.
fn refused(bad: &Path) {
    let (dir, files) = calltree_runs();
    let out = dir.join(format!("refused-{}.json", bad.file_name().unwrap().to_string_lossy()));
    let o = stint(&["merge", path_str(&files[0]), path_str(bad), "-o", path_str(&out)]);
    assert_eq!(o.status, 2, "{o:?}");
    let err = o.stderr_str();
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.starts_with(&format!("{}: ", bad.display())), "{err}");
    assert!(!out.exists(), "{} written", out.display());
    let o = stint(&["report", path_str(&files[0]), path_str(bad)]);
    assert_eq!(o.status, 2, "{o:?}");
    assert!(o.stderr_str().starts_with(&format!("{}: ", bad.display())), "{o:?}");
}

#[test]
fn missing_file_exits_2_naming_it() {
    refused(&calltree_runs().0.join("no-such.stint"));
}

#[test]
fn garbage_file_exits_2_naming_it() {
    let bad = calltree_runs().0.join("garbage.stint");
    std::fs::write(&bad, b"not a profile at all\n").unwrap();
    refused(&bad);
}

/// The calls of every call path of a document's threads, keyed by the path's function names
/// from the root (`main;a;b`), summed over threads.
fn calls_by_path(doc: &serde_json::Value) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    for t in doc["threads"].as_array().expect("threads") {
        let nodes = t["calltree"].as_array().cloned().unwrap_or_default();
        let mut paths: Vec<String> = Vec::with_capacity(nodes.len());
        for n in &nodes {
            let f = n["function"].as_str().expect("function");
            let path = match n["parent"].as_u64() {
                Some(p) => format!("{};{f}", paths[p as usize]),
                None => f.to_owned(),
            };
            *out.entry(path.clone()).or_insert(0) += n["calls"].as_u64().expect("calls");
            paths.push(path);
        }
    }
    out
}

#[test]
fn call_paths_sum_path_by_path() {
    let (dir, files) = calltree_runs();
    let merged = merge_ok(&strs(files), &dir.join("paths.json"));
    let mut want: BTreeMap<String, u64> = BTreeMap::new();
    for f in files {
        for (path, calls) in calls_by_path(&report_json(f)) {
            *want.entry(path).or_insert(0) += calls;
        }
    }
    assert!(want.keys().any(|p| p.contains(";")), "the runs have call paths: {want:?}");
    assert_eq!(calls_by_path(&merged), want);
}
