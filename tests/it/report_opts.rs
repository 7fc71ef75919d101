//! The options of `stint report` that make a report something to act on, on one run of
//! `testbins/report_opts.c` (pie-O2): two workers named `worker-1`, `worker-2` that call
//! `heavy` twice (a long spin) and `light` 1000 times, and a main thread that calls a
//! function with a 78-character name. The run is made once with the default spec (timers)
//! and once with a calls-only spec; the exact calls come from `stint report --format json`.
//!
//! | test | what it checks |
//! | --- | --- |
//! | `default_sort_is_cpu` | a worker's rows: worker, heavy (timed, by CPU time), then light (untimed) |
//! | `sort_calls` / `sort_wall` | light, heavy, worker by calls; worker, heavy by wall time |
//! | `sort_self_is_refused` | a profile without call paths (calls-only spec): exit 2, one line naming call paths |
//! | `sort_self` | `--sort self` on a worker: heavy, worker, then light (untimed) |
//! | `top_cuts_and_counts` | `--top 1`: one row per thread and `… N more functions (--top 0 for all)` with N and the calls the JSON gives |
//! | `thread_by_tid` / `thread_by_glob` / `thread_no_match` | `--thread TID`, `--thread 'worker-*'`; no match: exit 2 |
//! | `width_shortens_long_names` | `--width 108`: the long name shortened with `…` in the middle, lines within 108 columns; no `--width` off a terminal: the full name |
//! | `csv_rows_and_calls` | `--format csv` parses (RFC 4180), one record per (thread, function) of the JSON with its exact calls |
//! | `off_for_calls_only_spec` | calls-only spec: narrow table by default; `--sort cpu` and CSV say `off` |

use crate::common::*;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

const LONG: &str = "a_function_with_a_really_long_name_as_cxx_templates_produce_them_quite_often";

struct Runs {
    timed: PathBuf,
    calls_only: PathBuf,
}

/// Build, rewrite (default spec, and a calls-only spec) and run the program once each.
fn runs() -> &'static Runs {
    static RUNS: OnceLock<Runs> = OnceLock::new();
    RUNS.get_or_init(|| {
        let prog = program("report_opts");
        let bin = build(&prog, Variant::PieO2);
        let dir = fresh_dir("report_opts");
        let spec = dir.join("calls.yaml");
        std::fs::write(
            &spec,
            "metrics:\n  - {name: calls, kind: counter, at: entry, functions: [\"*\"], on_at_start: true}\n",
        )
        .unwrap();
        let timed_bin = dir.join("timed").join("report_opts");
        rewrite(&bin, &timed_bin);
        let calls_bin = dir.join("calls").join("report_opts");
        std::fs::create_dir_all(dir.join("calls")).unwrap();
        let o = stint(&["rewrite", path_str(&bin), "-o", path_str(&calls_bin), "--spec", path_str(&spec)]);
        assert_eq!(o.status, 0, "rewrite with {}: {o:?}", spec.display());
        let run = |exe: &PathBuf, name: &str| {
            let profile = dir.join(format!("{name}.stint"));
            let o = Run::new(exe, &dir).env("STINT_PROFILE", path_str(&profile)).run();
            assert_eq!(o.status, 0, "{}: {o:?}", exe.display());
            assert!(o.stdout_str().starts_with("report_opts "), "{o:?}");
            profile
        };
        Runs { timed: run(&timed_bin, "timed"), calls_only: run(&calls_bin, "calls") }
    })
}

fn report(profile: &Path, args: &[&str]) -> String {
    let mut a = vec!["report", path_str(profile)];
    a.extend(args);
    let o = stint(&a);
    assert_eq!(o.status, 0, "stint {}: {o:?}", a.join(" "));
    o.stdout_str()
}

/// Function names of the first section whose heading contains `heading`, in order.
fn section_names(table: &str, heading: &str) -> Vec<String> {
    let mut lines = table.lines().skip_while(|l| !(l.starts_with("thread ") && l.contains(heading)));
    assert!(lines.next().is_some(), "no thread section with {heading:?}:\n{table}");
    let head = lines.next().unwrap();
    let col = head.split_whitespace().position(|w| w == "function").unwrap();
    // `cpu ms` and friends are two words in the heading, one cell in the rows
    let col = col - head.matches(" ms ").count() - head.matches(" us ").count() - head.matches("self ").count();
    lines
        .take_while(|l| !l.is_empty() && !l.contains("more function"))
        .map(|l| l.split_whitespace().nth(col).unwrap().to_owned())
        .collect()
}

/// The workers' functions among `names`, in order.
fn worker_fns(names: &[String]) -> Vec<&str> {
    names.iter().map(String::as_str).filter(|n| ["worker", "heavy", "light"].contains(n)).collect()
}

fn json() -> Value {
    report_json(&runs().timed)
}

/// tid → (thread name, function → calls), from the JSON report.
fn calls_by_thread() -> BTreeMap<u64, (String, BTreeMap<String, u64>)> {
    threads(&json())
        .iter()
        .map(|t| {
            let fns = t["functions"].as_array().unwrap().iter();
            let fns = fns.map(|f| (f["name"].as_str().unwrap().to_owned(), f["calls"].as_u64().unwrap())).collect();
            (t["tid"].as_u64().unwrap(), (t["name"].as_str().unwrap_or("").to_owned(), fns))
        })
        .collect()
}

#[test]
fn default_sort_is_cpu() {
    let _share = cpu_share();
    let t = report(&runs().timed, &[]);
    assert_eq!(worker_fns(&section_names(&t, "name: worker-1")), ["worker", "heavy", "light"], "{t}");
    assert_eq!(t, report(&runs().timed, &["--sort", "cpu"]));
}

#[test]
fn sort_calls() {
    let _share = cpu_share();
    let t = report(&runs().timed, &["--sort", "calls"]);
    for w in ["worker-1", "worker-2"] {
        assert_eq!(worker_fns(&section_names(&t, &format!("name: {w}"))), ["light", "heavy", "worker"], "{t}");
    }
}

#[test]
fn sort_wall() {
    let _share = cpu_share();
    let t = report(&runs().timed, &["--sort", "wall"]);
    assert_eq!(worker_fns(&section_names(&t, "name: worker-2")), ["worker", "heavy", "light"], "{t}");
}

#[test]
fn sort_self_is_refused() {
    let _share = cpu_share();
    // The calls-only spec times nothing, so its profile has no call paths.
    let o = stint(&["report", path_str(&runs().calls_only), "--sort", "self"]);
    assert_eq!(o.status, 2, "{o:?}");
    assert!(o.stdout.is_empty(), "{o:?}");
    let err = o.stderr_str();
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains(": --sort self: ") && err.contains("no call paths"), "{err}");
}

#[test]
fn sort_self() {
    let _share = cpu_share();
    // heavy spends its time itself, worker in heavy; light is not timed (no self time).
    let t = report(&runs().timed, &["--sort", "self", "--thread", "worker-1"]);
    assert_eq!(worker_fns(&section_names(&t, "worker-1")), ["heavy", "worker", "light"], "{t}");
}

#[test]
fn top_cuts_and_counts() {
    let _share = cpu_share();
    let t = report(&runs().timed, &["--top", "1", "--sort", "calls"]);
    for (tid, (_, fns)) in calls_by_thread() {
        let heading = format!("thread {tid} ");
        assert_eq!(section_names(&t, &heading).len(), 1, "{t}");
        let mut calls: Vec<u64> = fns.values().copied().collect();
        calls.sort_unstable_by(|a, b| b.cmp(a));
        let rest: u64 = calls[1..].iter().sum();
        let more = fns.len() - 1;
        let line = t.lines().skip_while(|l| !l.starts_with(&heading)).find(|l| l.contains("more function")).unwrap();
        let s = if more == 1 { "" } else { "s" };
        assert_eq!(
            line.split_whitespace().collect::<Vec<_>>().join(" "),
            format!("{rest} … {more} more function{s} (--top 0 for all)")
        );
    }
    assert_eq!(report(&runs().timed, &["--top", "0"]), report(&runs().timed, &[]));
}

#[test]
fn thread_by_tid() {
    let _share = cpu_share();
    let by = calls_by_thread();
    let (tid, _) = by.iter().find(|(_, (name, _))| name == "worker-2").unwrap();
    let t = report(&runs().timed, &["--thread", &tid.to_string()]);
    assert_eq!(t.matches("\nthread ").count(), 1, "{t}");
    assert!(t.contains(&format!("\nthread {tid}  name: worker-2")), "{t}");
    // 1004 calls of the program's functions, and its calls into snprintf and pthread_self
    // (imports are points, D19).
    assert!(t.contains("\ntotal: 1 of 3 threads, 1006 calls\n"), "{t}");
}

#[test]
fn thread_by_glob() {
    let _share = cpu_share();
    let t = report(&runs().timed, &["--thread", "worker-*"]);
    assert_eq!(t.matches("\nthread ").count(), 2, "{t}");
    assert!(t.contains("name: worker-1") && t.contains("name: worker-2") && !t.contains("(main)"), "{t}");
    assert!(t.contains("\ntotal: 2 of 3 threads, 2012 calls\n"), "{t}");
    let csv = report(&runs().timed, &["--thread", "worker-*", "--format", "csv"]);
    assert!(csv.lines().skip(1).all(|l| l.contains(",worker-")), "{csv}");
}

#[test]
fn thread_no_match() {
    let _share = cpu_share();
    let o = stint(&["report", path_str(&runs().timed), "--thread", "nobody*"]);
    assert_eq!(o.status, 2, "{o:?}");
    let err = o.stderr_str();
    assert!(err.starts_with(&format!("{}: no thread matches --thread nobody*", runs().timed.display())), "{err}");
}

#[test]
fn width_shortens_long_names() {
    let _share = cpu_share();
    let t = report(&runs().timed, &["--width", "108", "--sort", "calls"]);
    // 108 columns less calls, the three timer columns (headings 11, 11, 11), the two self
    // columns (12, 12: the profile has call paths) and the address column (its heading, 7)
    // leave 23 for the name: 11 characters from its start, `…`, 11 from its end.
    let row = t.lines().find(|l| l.contains("a_function_")).unwrap_or_else(|| panic!("{t}"));
    assert!(row.ends_with("  a_function_…quite_often") && row.contains("  0x"), "{row}");
    assert!(!t.contains(LONG), "{t}");
    for l in t.lines().filter(|l| l.starts_with("  ")) {
        assert!(l.chars().count() <= 108, "{l:?} is wider than 108\n{t}");
    }
    assert!(report(&runs().timed, &[]).contains(LONG));
}

/// RFC 4180 records: quoted fields may hold commas, doubled quotes and line breaks.
fn parse_csv(text: &str) -> Vec<Vec<String>> {
    let (mut rows, mut row, mut field) = (Vec::new(), Vec::new(), String::new());
    let mut chars = text.chars().peekable();
    let mut quoted = false;
    while let Some(c) = chars.next() {
        match (quoted, c) {
            (true, '"') if chars.peek() == Some(&'"') => {
                chars.next();
                field.push('"');
            }
            (true, '"') => quoted = false,
            (true, c) => field.push(c),
            (false, '"') => quoted = true,
            (false, ',') => row.push(std::mem::take(&mut field)),
            (false, '\n') => {
                row.push(std::mem::take(&mut field));
                rows.push(std::mem::take(&mut row));
            }
            (false, c) => field.push(c),
        }
    }
    assert!(field.is_empty() && row.is_empty() && !quoted, "CSV does not end with a line break:\n{text}");
    rows
}

#[test]
fn csv_rows_and_calls() {
    let _share = cpu_share();
    let rows = parse_csv(&report(&runs().timed, &["--format", "csv"]));
    assert_eq!(rows[0], ["tid", "thread", "function", "address", "calls", "cpu_ns", "wall_ns"]);
    let by = calls_by_thread();
    assert_eq!(rows.len() - 1, by.values().map(|(_, f)| f.len()).sum::<usize>());
    for r in &rows[1..] {
        assert_eq!(r.len(), 7, "{r:?}");
        let (name, fns) = &by[&r[0].parse::<u64>().unwrap()];
        assert_eq!(&r[1], name);
        assert_eq!(r[4].parse::<u64>().unwrap(), fns[&r[2]], "{r:?}");
        for ns in &r[5..] {
            assert!(ns.is_empty() || ns == "open" || ns == "off" || ns.parse::<u64>().is_ok(), "{r:?}");
        }
    }
    let heavy: Vec<_> = rows.iter().filter(|r| r[2] == "heavy").collect();
    assert_eq!(heavy.len(), 2);
    assert!(heavy.iter().all(|r| r[4] == "2" && r[5].parse::<u64>().unwrap() > 0), "{heavy:?}");
}

#[test]
fn off_for_calls_only_spec() {
    let _share = cpu_share();
    let narrow = report(&runs().calls_only, &[]);
    assert!(!narrow.contains("cpu ms") && !narrow.contains("off"), "{narrow}");
    let t = report(&runs().calls_only, &["--sort", "cpu"]);
    let row = t.lines().find(|l| l.ends_with(" heavy")).unwrap_or_else(|| panic!("{t}"));
    let cells = row.split_whitespace().collect::<Vec<_>>();
    assert_eq!((&cells[..4], cells.last()), (&["2", "off", "off", "off"][..], Some(&"heavy")), "{t}");
    assert!(!t.contains("0.000"), "{t}");
    assert!(t.contains("\noff: the profile measured no times"), "{t}");
    assert!(!t.contains("times: inclusive"), "{t}");
    let rows = parse_csv(&report(&runs().calls_only, &["--format", "csv"]));
    assert!(rows[1..].iter().all(|r| r[5] == "off" && r[6] == "off"), "{rows:?}");
}
