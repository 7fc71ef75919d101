//! Calling-context trees (DESIGN D16) on real runs of `testbins/callpaths.c` (pie-O2): main
//! calls a (→ b ×3), c (→ b ×5), rec(12) twice (a chain of 13 levels) and tail_caller 4
//! times (`jmp tail_target` at -O2); thread w1 calls a twice (b ×6), thread w2 calls c three
//! times (b ×15). Each run is made once; the tree comes from `threads[].calltree` of `stint
//! report --format json`.
//!
//! | test | what it checks |
//! | --- | --- |
//! | `same_output` | the rewritten program (tree on, tree of 4 nodes, off by env, by spec, by control file) behaves as the original |
//! | `exact_calls_per_path` | main→a→b 3, main→c→b 5, rec levels 1..13 each 2 calls; w1→a→b 2/6, w2→c→b 3/15; no c on w1, no a on w2 |
//! | `node_calls_sum_to_flat_calls` | per thread, every function's calls summed over its nodes = its flat calls |
//! | `flat_time_is_the_outermost_nodes` | per thread and function, wall/cpu of the nodes with no ancestor of the same function sum to the flat wall/cpu (± 1 ns per node: ns rounding) |
//! | `children_within_inclusive` | every node: its children's wall ≤ its wall (± 1 ns per child); CPU within 50 µs (the CPU clock is re-synchronised, D11); self = inclusive − children |
//! | `tail_callee_hangs_under_the_callers_caller` | tail_target's node is a child of main, not of tail_caller (the tail `jmp` ends the caller's frame) |
//! | `callers_of_b` / `callees_of_main` | `--callers b` lists a 3 and c 5 on main, a 6 on w1, c 15 on w2; `--callees main` lists a 1, c 1, rec 2 |
//! | `calltree_view_and_depth` | `--calltree`: one line per node, indented by depth; `--depth 2` folds the rest and says how many |
//! | `self_columns_and_sort_self` | `--by function` has `self cpu ms`/`self wall ms`; `--sort self` works |
//! | `overflow_is_counted` | `STINT_CALLTREE_NODES=4`: at most 4 nodes per thread; nodes' calls + `calltree_lost` = the full tree's calls, per thread |
//! | `off_by_env_and_by_spec` | `STINT_CALLTREE_NODES=0`, a spec with `call_paths: false` and a control file with `call_paths: false`: no `calltree` key, `--calltree` says so, `--sort self` is refused |

use crate::common::*;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

struct Runs {
    original: Outcome,
    /// (profile, outcome) of the default run, 4 nodes, env off, spec off.
    full: (PathBuf, Outcome),
    tiny: (PathBuf, Outcome),
    env_off: (PathBuf, Outcome),
    spec_off: (PathBuf, Outcome),
    ctl_off: (PathBuf, Outcome),
}

fn runs() -> &'static Runs {
    static RUNS: OnceLock<Runs> = OnceLock::new();
    RUNS.get_or_init(|| {
        let _turn = cpu_turn();
        let prog = program("callpaths");
        let bin = build(&prog, Variant::PieO2);
        let dir = fresh_dir("callpaths");
        let out = dir.join("on").join("callpaths");
        rewrite(&bin, &out);
        let spec = dir.join("nopaths.yaml");
        let text =
            std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../specs/default.yaml")).unwrap();
        assert!(text.contains("call_paths: true"), "specs/default.yaml turns call paths on");
        std::fs::write(&spec, text.replace("call_paths: true", "call_paths: false")).unwrap();
        std::fs::create_dir_all(dir.join("off")).unwrap();
        let off = dir.join("off").join("callpaths");
        let o = stint(&["rewrite", path_str(&bin), "-o", path_str(&off), "--spec", path_str(&spec)]);
        assert_eq!(o.status, 0, "rewrite --spec {}: {o:?}", spec.display());
        let control = dir.join("control.yaml");
        std::fs::write(&control, "call_paths: false\n").unwrap();
        let run = |exe: &Path, name: &str, env: Option<(&str, &str)>| {
            let profile = dir.join(format!("{name}.stint"));
            let mut r = Run::new(exe, &dir).env("STINT_PROFILE", path_str(&profile));
            if let Some((k, v)) = env {
                r = r.env(k, v);
            }
            (profile, r.run())
        };
        Runs {
            original: Run::new(&bin, &dir).run(),
            full: run(&out, "full", None),
            tiny: run(&out, "tiny", Some(("STINT_CALLTREE_NODES", "4"))),
            env_off: run(&out, "env_off", Some(("STINT_CALLTREE_NODES", "0"))),
            spec_off: run(&off, "spec_off", None),
            ctl_off: run(&out, "ctl_off", Some(("STINT_CONTROL", path_str(&control)))),
        }
    })
}

fn json(profile: &Path) -> Value {
    report_json(profile)
}

/// One node of a thread's tree, with its function's name resolved.
#[derive(Clone, Debug)]
struct Node {
    parent: Option<usize>,
    function: String,
    calls: u64,
    cpu: u64,
    wall: u64,
    self_cpu: u64,
    self_wall: u64,
}

fn tree(thread: &Value) -> Vec<Node> {
    let n = |v: &Value, k: &str| v[k].as_u64().unwrap_or_else(|| panic!("{k} of {v}"));
    thread
        .get("calltree")
        .and_then(Value::as_array)
        .unwrap_or_else(|| panic!("no calltree in {}", thread["tid"]))
        .iter()
        .map(|v| Node {
            parent: v["parent"].as_u64().map(|p| p as usize),
            function: v["function"].as_str().unwrap().to_owned(),
            calls: n(v, "calls"),
            cpu: n(v, "cpu_ns"),
            wall: n(v, "wall_ns"),
            self_cpu: n(v, "self_cpu_ns"),
            self_wall: n(v, "self_wall_ns"),
        })
        .collect()
}

/// The threads of a report by their first function (`main` for the main thread).
fn threads(r: &Value) -> BTreeMap<String, Value> {
    r["threads"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            let key = if t["main"].as_bool() == Some(true) {
                "main".to_string()
            } else {
                t["first_function"].as_str().unwrap_or("?").to_owned()
            };
            (key, t.clone())
        })
        .collect()
}

/// The path of node `i`, root first, e.g. `_start/main/a/b`.
fn path(t: &[Node], i: usize) -> String {
    let mut names = vec![t[i].function.as_str()];
    let mut at = t[i].parent;
    while let Some(p) = at {
        names.push(&t[p].function);
        at = t[p].parent;
    }
    names.reverse();
    names.join("/")
}

/// Calls per path (summed: one path has one node, but keep it robust).
fn calls_by_path(t: &[Node]) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    for i in 0..t.len() {
        *out.entry(path(t, i)).or_insert(0) += t[i].calls;
    }
    out
}

fn full() -> (BTreeMap<String, Value>, Value) {
    let r = json(&runs().full.0);
    (threads(&r), r)
}

#[test]
fn same_output() {
    let r = runs();
    let all = [
        ("full", &r.full),
        ("tiny", &r.tiny),
        ("env_off", &r.env_off),
        ("spec_off", &r.spec_off),
        ("ctl_off", &r.ctl_off),
    ];
    for (name, (_, o)) in all {
        assert!(o.same_behaviour(&r.original), "{name}: {}", describe_difference("original", &r.original, name, o));
    }
}

#[test]
fn exact_calls_per_path() {
    let (th, _) = full();
    let main = calls_by_path(&tree(&th["main"]));
    let want = [
        ("_start/main/a", 1),
        ("_start/main/a/b", 3),
        ("_start/main/c", 1),
        ("_start/main/c/b", 5),
        ("_start/main/tail_caller", 4),
    ];
    for (p, n) in want {
        assert_eq!(main.get(p), Some(&n), "main thread, path {p}: {main:#?}");
    }
    for level in 1..=13 {
        let p = format!("_start/main{}", "/rec".repeat(level));
        assert_eq!(main.get(&p), Some(&2), "rec level {level}: {main:#?}");
    }
    assert!(!main.keys().any(|k| k.ends_with(&"/rec".repeat(14))), "rec deeper than 13 levels: {main:#?}");
    let w1 = calls_by_path(&tree(&th["w1"]));
    assert_eq!((w1.get("w1/a"), w1.get("w1/a/b")), (Some(&2), Some(&6)), "{w1:#?}");
    assert!(!w1.keys().any(|k| k.contains("/c")), "w1 never calls c: {w1:#?}");
    let w2 = calls_by_path(&tree(&th["w2"]));
    assert_eq!((w2.get("w2/c"), w2.get("w2/c/b")), (Some(&3), Some(&15)), "{w2:#?}");
    assert!(!w2.keys().any(|k| k.contains("/a")), "w2 never calls a: {w2:#?}");
}

#[test]
fn node_calls_sum_to_flat_calls() {
    let (th, _) = full();
    for (name, t) in &th {
        let mut sums: BTreeMap<String, u64> = BTreeMap::new();
        for n in tree(t) {
            *sums.entry(n.function).or_insert(0) += n.calls;
        }
        let flat: BTreeMap<String, u64> = t["functions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| (f["name"].as_str().unwrap().to_owned(), f["calls"].as_u64().unwrap()))
            .collect();
        for (f, n) in &sums {
            assert_eq!(flat.get(f), Some(n), "thread {name}, {f}: nodes {n}, flat {:?}", flat.get(f));
        }
        assert_eq!(t.get("calltree_lost"), None, "thread {name}: nothing lost with the default capacity");
    }
}

#[test]
fn flat_time_is_the_outermost_nodes() {
    let (th, _) = full();
    for (name, t) in &th {
        let nodes = tree(t);
        let mut sums: BTreeMap<String, (u64, u64, u64)> = BTreeMap::new();
        for (i, n) in nodes.iter().enumerate() {
            let mut at = n.parent;
            let mut nested = false;
            while let Some(p) = at {
                nested |= nodes[p].function == n.function;
                at = nodes[p].parent;
            }
            if !nested {
                let e = sums.entry(n.function.clone()).or_default();
                e.0 += n.cpu;
                e.1 += n.wall;
                e.2 += 1;
            }
            let _ = i;
        }
        for f in t["functions"].as_array().unwrap() {
            let fname = f["name"].as_str().unwrap();
            let (Some(cpu), Some(wall), Some(&(ncpu, nwall, count))) =
                (f["cpu_ns"].as_u64(), f["wall_ns"].as_u64(), sums.get(fname))
            else {
                continue;
            };
            assert!(wall.abs_diff(nwall) <= count, "thread {name}, {fname}: flat wall {wall} ns, nodes {nwall} ns");
            assert!(cpu.abs_diff(ncpu) <= count, "thread {name}, {fname}: flat cpu {cpu} ns, nodes {ncpu} ns");
        }
    }
}

#[test]
fn children_within_inclusive() {
    let (th, _) = full();
    for (name, t) in &th {
        let nodes = tree(t);
        let mut kids: Vec<(u64, u64, u64)> = vec![(0, 0, 0); nodes.len()];
        for n in &nodes {
            if let Some(p) = n.parent {
                kids[p].0 += n.cpu;
                kids[p].1 += n.wall;
                kids[p].2 += 1;
            }
        }
        for (i, n) in nodes.iter().enumerate() {
            let (kc, kw, k) = kids[i];
            let ctx = format!("thread {name}, {}", path(&nodes, i));
            if n.wall == 0 && n.function == "_start" {
                continue; // open: never returns
            }
            assert!(kw <= n.wall + k, "{ctx}: children's wall {kw} ns > its wall {} ns", n.wall);
            assert!(kc <= n.cpu + 50_000, "{ctx}: children's cpu {kc} ns > its cpu {} ns + 50 us", n.cpu);
            assert!(n.self_wall.abs_diff(n.wall.saturating_sub(kw)) <= 1 + k, "{ctx}: self wall {}", n.self_wall);
            assert!(n.self_cpu.abs_diff(n.cpu.saturating_sub(kc)) <= 1 + k, "{ctx}: self cpu {}", n.self_cpu);
        }
    }
}

#[test]
fn tail_callee_hangs_under_the_callers_caller() {
    let (th, _) = full();
    let main = calls_by_path(&tree(&th["main"]));
    assert_eq!(main.get("_start/main/tail_target"), Some(&4), "{main:#?}");
    assert!(!main.keys().any(|k| k.contains("tail_caller/tail_target")), "{main:#?}");
}

fn report(profile: &Path, args: &[&str]) -> String {
    let mut a = vec!["report", path_str(profile)];
    a.extend(args);
    let o = stint(&a);
    assert_eq!(o.status, 0, "stint {}: {o:?}", a.join(" "));
    o.stdout_str()
}

/// The rows (`calls`, name) of each thread section of a callers/callees table, by the
/// thread's heading.
fn relatives(text: &str) -> Vec<(String, Vec<(u64, String)>)> {
    let mut out: Vec<(String, Vec<(u64, String)>)> = Vec::new();
    for l in text.lines() {
        if l.starts_with("thread ") {
            out.push((l.to_owned(), Vec::new()));
        } else if let Some((_, rows)) = out.last_mut() {
            let w: Vec<&str> = l.split_whitespace().collect();
            if w.len() == 4 && w[0].parse::<u64>().is_ok() {
                rows.push((w[0].parse().unwrap(), w[3].to_owned()));
            }
        }
    }
    out
}

#[test]
fn callers_of_b() {
    let text = report(&runs().full.0, &["--callers", "b"]);
    let secs = relatives(&text);
    assert_eq!(secs.len(), 3, "{text}");
    let find = |h: &str| secs.iter().find(|s| s.0.contains(h)).map(|s| s.1.clone()).unwrap_or_default();
    let mut main = secs[0].1.clone();
    main.sort();
    assert!(secs[0].0.contains("(main)"), "{text}");
    assert_eq!(main, [(3, "a".to_string()), (5, "c".to_string())], "{text}");
    assert_eq!(find("start: w1"), [(6, "a".to_string())], "{text}");
    assert_eq!(find("start: w2"), [(15, "c".to_string())], "{text}");
    assert!(text.contains("b: 8 calls"), "{text}");
}

#[test]
fn callees_of_main() {
    let text = report(&runs().full.0, &["--callees", "main"]);
    let secs = relatives(&text);
    assert_eq!(secs.len(), 1, "only the main thread calls main: {text}");
    let rows: BTreeMap<String, u64> = secs[0].1.iter().map(|(n, f)| (f.clone(), *n)).collect();
    for (f, n) in [("a", 1), ("c", 1), ("rec", 2), ("tail_caller", 4), ("tail_target", 4)] {
        assert_eq!(rows.get(f), Some(&n), "{f}: {text}");
    }
}

#[test]
fn calltree_view_and_depth() {
    let (th, _) = full();
    let nodes: usize = th.values().map(|t| tree(t).len()).sum();
    let text = report(&runs().full.0, &["--calltree"]);
    let rows = text.lines().filter(|l| l.split_whitespace().next().is_some_and(|w| w.parse::<u64>().is_ok())).count();
    assert_eq!(rows, nodes, "one row per node: {text}");
    assert!(text.lines().any(|l| l.ends_with("      b") && !l.ends_with("        b")), "b at depth 3 on main: {text}");
    let folded = report(&runs().full.0, &["--calltree", "--depth", "2"]);
    let shown =
        folded.lines().filter(|l| l.split_whitespace().next().is_some_and(|w| w.parse::<u64>().is_ok())).count();
    let note = folded.lines().find(|l| l.contains("deeper nodes folded")).unwrap_or_else(|| panic!("{folded}"));
    let hidden: usize = folded
        .lines()
        .filter(|l| l.contains("deeper nodes folded"))
        .map(|l| l.trim_start().trim_start_matches('(').split_whitespace().next().unwrap().parse::<usize>().unwrap())
        .sum();
    assert_eq!(shown + hidden, nodes, "{note}\n{folded}");
}

#[test]
fn self_columns_and_sort_self() {
    let text = report(&runs().full.0, &["--thread", "w2"]);
    assert!(text.contains("self cpu ms") && text.contains("self wall ms"), "{text}");
    let o = stint(&["report", path_str(&runs().full.0), "--sort", "self", "--thread", "w2"]);
    assert_eq!(o.status, 0, "{o:?}");
}

#[test]
fn overflow_is_counted() {
    let (th, _) = full();
    let tiny = threads(&json(&runs().tiny.0));
    let mut lost_somewhere = false;
    for (name, t) in &tiny {
        let nodes = tree(t);
        assert!(nodes.len() <= 4, "thread {name}: {} nodes with STINT_CALLTREE_NODES=4", nodes.len());
        let lost = t.get("calltree_lost").and_then(Value::as_u64).unwrap_or(0);
        lost_somewhere |= lost > 0;
        let kept: u64 = nodes.iter().map(|n| n.calls).sum();
        let all: u64 = tree(&th[name]).iter().map(|n| n.calls).sum();
        assert_eq!(kept + lost, all, "thread {name}: kept {kept} + lost {lost} = the full tree's calls");
    }
    assert!(lost_somewhere, "a 4-node tree overflows on the main thread");
    let text = report(&runs().tiny.0, &["--calltree"]);
    assert!(text.contains("calls not in the tree"), "{text}");
}

#[test]
fn off_by_env_and_by_spec() {
    let offs = [
        ("STINT_CALLTREE_NODES=0", &runs().env_off.0),
        ("spec call_paths: false", &runs().spec_off.0),
        ("control file call_paths: false", &runs().ctl_off.0),
    ];
    for (what, profile) in offs {
        let r = json(profile);
        for t in r["threads"].as_array().unwrap() {
            assert!(t.get("calltree").is_none() && t.get("calltree_lost").is_none(), "{what}: {t}");
            assert!(!t["functions"].as_array().unwrap().is_empty(), "{what}: calls still counted");
        }
        let text = report(profile, &["--calltree"]);
        assert!(text.contains("(no call paths"), "{what}: {text}");
        let o = stint(&["report", path_str(profile), "--sort", "self"]);
        assert_eq!(o.status, 2, "{what}: {o:?}");
        assert!(o.stderr_str().contains("no call paths"), "{what}: {o:?}");
    }
}
