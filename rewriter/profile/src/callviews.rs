//! The call-path views of `stint report` (DESIGN D16): self time per function, the
//! top-down calling-context tree per thread (`--calltree`, `--depth`), and gprof-style
//! callers and callees of one function (`--callers F`, `--callees F`).
//!
//! Everything here is computed from [`ThreadProfile::calltree`] through
//! [`crate::calltree`]; a thread without a tree (a profile written with `call_paths: false`,
//! `STINT_CALLTREE_NODES=0`, or read `--since-snapshot`) shows that it has none instead of
//! figures. The tree holds the *timed* functions (those with a frame on the shadow stack); a
//! function measured by calls only is in no path, so its time belongs to its caller's self time.
//! A recursive call is a node of its own (a chain of nodes, one per level), so the inclusive
//! time of a recursive function's deeper levels is also inside its outer levels: the views
//! show every level, and the self time summed over the levels counts each instant once.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use crate::calltree::{self_ticks, CallNode};
use crate::profile::{Profile, ThreadProfile};
use crate::report::{
    column_widths, columns, point_name, select_threads, shorten_middle, thread_heading, SortBy, MIN_SHORT_NAME,
};

/// Self CPU and wall ticks per function name of thread `t` (summed over the function's
/// nodes); `None` when the thread has no tree.
pub fn self_by_function(p: &Profile, t: &ThreadProfile) -> Option<BTreeMap<String, (u64, u64)>> {
    if t.calltree.is_empty() {
        return None;
    }
    let mut out: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    for (n, (c, w)) in t.calltree.iter().zip(self_ticks(&t.calltree)) {
        let e = out.entry(point_name(p, n.point)).or_default();
        e.0 = e.0.saturating_add(c);
        e.1 = e.1.saturating_add(w);
    }
    Some(out)
}

/// What the call-path views show.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TreeOptions {
    /// Only the threads [`crate::report::thread_matches`] selects.
    pub thread: Option<String>,
    /// Show nodes at most this deep (roots are depth 1); deeper ones are folded into their
    /// ancestor's inclusive figures. All if `None`.
    pub depth: Option<usize>,
    /// The order of siblings (most first): inclusive CPU (default), wall, or calls.
    pub sort: SortBy,
    /// Shorten names in the middle so rows fit this many columns (`--width`); never below
    /// [`MIN_SHORT_NAME`] characters.
    pub width: Option<usize>,
}

/// Shorten the last column of `rows` (a name, after its indentation) so each row fits
/// `width` characters as [`columns`] lays it out with a two-space indent.
fn fit_names(rows: &mut [Vec<String>], width: Option<usize>) {
    let Some(width) = width else { return };
    let Some(last) = rows.first().map(|r| r.len() - 1) else { return };
    let widths = column_widths(rows);
    let fixed = 2 + widths[..last].iter().map(|w| w + 2).sum::<usize>();
    for row in rows.iter_mut().skip(1) {
        let name = &row[last];
        let body = name.trim_start_matches(' ');
        let indent = name.len() - body.len();
        let max = width.saturating_sub(fixed + indent).max(MIN_SHORT_NAME);
        row[last] = format!("{}{}", &name[..indent], shorten_middle(body, max));
    }
}

/// Milliseconds with three decimals, `-` if unknown.
fn ms(ns: Option<u64>) -> String {
    ns.map_or("-".into(), |n| format!("{:.3}", n as f64 / 1e6))
}

fn percent(part: u64, whole: u64) -> String {
    if whole == 0 {
        "-".into()
    } else {
        format!("{:.1}", part as f64 * 100.0 / whole as f64)
    }
}

/// The key siblings are ordered by.
fn sort_key(n: &CallNode, sort: SortBy) -> u64 {
    match sort {
        SortBy::Calls => n.calls,
        SortBy::Cpu | SortBy::SelfCpu => n.cpu_ticks,
        SortBy::Wall => n.wall_ticks,
    }
}

/// Children of every node, and the roots, each ordered by `sort` (most first), then name.
fn children(p: &Profile, tree: &[CallNode], sort: SortBy) -> (Vec<usize>, Vec<Vec<usize>>) {
    let mut kids = vec![Vec::new(); tree.len()];
    let mut roots = Vec::new();
    for (i, n) in tree.iter().enumerate() {
        match n.parent.map(|p| p as usize).filter(|&p| p < i) {
            Some(parent) => kids[parent].push(i),
            None => roots.push(i),
        }
    }
    let order = |v: &mut Vec<usize>| {
        v.sort_by(|&a, &b| {
            sort_key(&tree[b], sort)
                .cmp(&sort_key(&tree[a], sort))
                .then_with(|| point_name(p, tree[a].point).cmp(&point_name(p, tree[b].point)))
        })
    };
    order(&mut roots);
    kids.iter_mut().for_each(order);
    (roots, kids)
}

/// The calling-context tree of each selected thread, top down: calls, inclusive CPU and
/// wall time, the % of the thread's CPU (wall when CPU time was off) and self times.
pub fn to_calltree_table(p: &Profile, opts: &TreeOptions) -> String {
    let mut out = format!("program {}  pid {}  threads {}\n", p.program, p.pid, p.threads.len());
    for t in select_threads(p, opts.thread.as_deref()) {
        let _ = write!(out, "\n{}\n", thread_heading(p, t));
        if t.calltree.is_empty() {
            out.push_str("  (no call paths: the profile was written with call paths off, or the thread entered no timed function)\n");
            continue;
        }
        let tree = &t.calltree;
        let selfs = self_ticks(tree);
        let (roots, kids) = children(p, tree, opts.sort);
        // The thread's time: the sum of the self times (the roots' inclusive times when every
        // root returned; a root still open, like `_start`, has none, but its callees do).
        let (cpu_total, wall_total) =
            selfs.iter().fold((0u64, 0u64), |(c, w), s| (c.saturating_add(s.0), w.saturating_add(s.1)));
        let by_cpu = cpu_total != 0;
        let mut rows = vec![vec![
            "calls".to_string(),
            if by_cpu { "cpu %" } else { "wall %" }.to_string(),
            "cpu ms".into(),
            "wall ms".into(),
            "self cpu ms".into(),
            "self wall ms".into(),
            "function".into(),
        ]];
        let mut folded = 0usize;
        let mut open = false;
        let mut stack: Vec<(usize, usize)> = roots.iter().rev().map(|&r| (r, 1)).collect();
        while let Some((i, depth)) = stack.pop() {
            let n = &tree[i];
            let name = format!("{}{}", "  ".repeat(depth - 1), point_name(p, n.point));
            // No time of its own yet, but its callees have some: none of its calls returned
            // (it still runs, or never returns, like `_start`).
            if n.cpu_ticks == 0 && n.wall_ticks == 0 && kids[i].iter().any(|&k| tree[k].wall_ticks != 0) {
                open = true;
                let o = || "open".to_string();
                rows.push(vec![n.calls.to_string(), o(), o(), o(), o(), o(), name]);
            } else {
                let share = if by_cpu { percent(n.cpu_ticks, cpu_total) } else { percent(n.wall_ticks, wall_total) };
                rows.push(vec![
                    n.calls.to_string(),
                    share,
                    ms(p.ticks_to_ns(n.cpu_ticks)),
                    ms(p.ticks_to_ns(n.wall_ticks)),
                    ms(p.ticks_to_ns(selfs[i].0)),
                    ms(p.ticks_to_ns(selfs[i].1)),
                    name,
                ]);
            }
            if opts.depth.is_some_and(|d| depth >= d) {
                folded += count_below(&kids, i);
                continue;
            }
            stack.extend(kids[i].iter().rev().map(|&k| (k, depth + 1)));
        }
        fit_names(&mut rows, opts.width);
        out.push_str(&columns(&rows, &[true, true, true, true, true, true, false], "  "));
        if folded > 0 {
            let _ = writeln!(out, "  ({folded} deeper nodes folded into their callers: --depth)");
        }
        if open {
            out.push_str("  open: none of its calls through this path returned yet (it still runs, or never returns, like _start)\n");
        }
        if t.calltree_lost > 0 {
            let _ = writeln!(
                out,
                "  calls not in the tree (it was full, or deeper than the shadow stack): {}",
                t.calltree_lost
            );
        }
    }
    out.push_str("\ntimes: inclusive per call path; self = inclusive − timed callees; %: of the thread's time (its self times summed)\n");
    out
}

/// Nodes below node `i`.
fn count_below(kids: &[Vec<usize>], i: usize) -> usize {
    let mut n = 0;
    let mut stack = kids[i].clone();
    while let Some(k) = stack.pop() {
        n += 1;
        stack.extend(&kids[k]);
    }
    n
}

/// Callers (`callers` true) or callees of one function on one thread, summed by name.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Relatives {
    /// The function's own figures on the thread: calls, inclusive CPU, wall ticks (its
    /// outermost levels only, so recursion is not counted twice), self CPU, self wall ticks.
    pub calls: u64,
    pub cpu_ticks: u64,
    pub wall_ticks: u64,
    pub self_cpu_ticks: u64,
    pub self_wall_ticks: u64,
    /// Per caller or callee name: (calls, CPU ticks, wall ticks) of the calls between the two.
    pub rows: BTreeMap<String, (u64, u64, u64)>,
}

/// What a caller row is called when the function was entered with no timed caller.
pub const ROOT_CALLER: &str = "<thread root>";

/// The callers or callees of `function` on thread `t`; `None` when the function is in no
/// node of the thread's tree.
pub fn relatives(p: &Profile, t: &ThreadProfile, function: &str, callers: bool) -> Option<Relatives> {
    let tree = &t.calltree;
    let selfs = self_ticks(tree);
    let is_f = |i: usize| point_name(p, tree[i].point) == function;
    let mut r = Relatives::default();
    let mut found = false;
    for (i, n) in tree.iter().enumerate() {
        if is_f(i) {
            found = true;
            r.calls += n.calls;
            r.self_cpu_ticks += selfs[i].0;
            r.self_wall_ticks += selfs[i].1;
            // Inclusive: only levels with no ancestor that is the function itself.
            let mut up = n.parent.map(|p| p as usize).filter(|&p| p < i);
            let mut nested = false;
            while let Some(a) = up {
                if is_f(a) {
                    nested = true;
                    break;
                }
                up = tree[a].parent.map(|p| p as usize).filter(|&p| p < a);
            }
            if !nested {
                r.cpu_ticks += n.cpu_ticks;
                r.wall_ticks += n.wall_ticks;
            }
            if callers {
                let name = match n.parent.map(|p| p as usize).filter(|&p| p < i) {
                    Some(parent) => point_name(p, tree[parent].point),
                    None => ROOT_CALLER.to_string(),
                };
                add(&mut r.rows, name, n);
            }
        } else if !callers && n.parent.map(|p| p as usize).is_some_and(|p| p < i && is_f(p)) {
            add(&mut r.rows, point_name(p, n.point), n);
        }
    }
    found.then_some(r)
}

fn add(rows: &mut BTreeMap<String, (u64, u64, u64)>, name: String, n: &CallNode) {
    let e = rows.entry(name).or_default();
    e.0 += n.calls;
    e.1 += n.cpu_ticks;
    e.2 += n.wall_ticks;
}

/// `--callers F` (`callers` true) or `--callees F`: per selected thread, the function's
/// figures, then one row per caller (callee) with the calls and times between the two, most
/// `sort` first.
pub fn to_relatives_table(p: &Profile, function: &str, callers: bool, opts: &TreeOptions) -> String {
    let mut out = format!("program {}  pid {}  threads {}\n", p.program, p.pid, p.threads.len());
    let what = if callers { "callers" } else { "callees" };
    let mut any = false;
    for t in select_threads(p, opts.thread.as_deref()) {
        if t.calltree.is_empty() {
            continue;
        }
        let Some(r) = relatives(p, t, function, callers) else { continue };
        any = true;
        let _ = write!(out, "\n{}\n", thread_heading(p, t));
        let _ = writeln!(
            out,
            "  {function}: {} calls, cpu {} ms, wall {} ms, self cpu {} ms, self wall {} ms",
            r.calls,
            ms(p.ticks_to_ns(r.cpu_ticks)),
            ms(p.ticks_to_ns(r.wall_ticks)),
            ms(p.ticks_to_ns(r.self_cpu_ticks)),
            ms(p.ticks_to_ns(r.self_wall_ticks)),
        );
        let mut rows: Vec<(&String, &(u64, u64, u64))> = r.rows.iter().collect();
        rows.sort_by(|a, b| {
            let key = |x: &(u64, u64, u64)| match opts.sort {
                SortBy::Calls => x.0,
                SortBy::Cpu | SortBy::SelfCpu => x.1,
                SortBy::Wall => x.2,
            };
            key(b.1).cmp(&key(a.1)).then_with(|| a.0.cmp(b.0))
        });
        let mut table = vec![vec![
            "calls".to_string(),
            "cpu ms".into(),
            "wall ms".into(),
            if callers { "caller" } else { "callee" }.to_string(),
        ]];
        for (name, (calls, cpu, wall)) in rows {
            table.push(vec![calls.to_string(), ms(p.ticks_to_ns(*cpu)), ms(p.ticks_to_ns(*wall)), name.clone()]);
        }
        if table.len() == 1 {
            let _ = writeln!(out, "  (no {what})");
        } else {
            fit_names(&mut table, opts.width);
            out.push_str(&columns(&table, &[true, true, true, false], "  "));
        }
    }
    if !any {
        let _ = writeln!(out, "\n{function}: in no call path of the selected threads");
    }
    let _ = writeln!(
        out,
        "\n{what}: calls and inclusive times of {function} {} each, summed over call paths",
        if callers { "from" } else { "to" }
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::parse;
    use crate::synthetic::{synthetic_meta, write_synthetic_with_trees, SyntheticNode};

    /// main → a → b ×3, main → c → b ×5, in ticks chosen so every self time is known, and
    /// 2 calls lost.
    fn profile() -> Profile {
        let meta = synthetic_meta("cp", &[("main", "0x10"), ("a", "0x20"), ("b", "0x30"), ("c", "0x40")]);
        let n = |parent: Option<u32>, point, calls, cpu, wall| SyntheticNode { parent, point, calls, cpu, wall };
        let tree = vec![
            n(None, 0, 1, 1000, 2000),
            n(Some(0), 1, 1, 300, 300),
            n(Some(1), 2, 3, 200, 200),
            n(Some(0), 3, 1, 600, 600),
            n(Some(3), 2, 5, 500, 500),
        ];
        parse(&write_synthetic_with_trees(&meta, &[(7, vec![(0, 1), (1, 1), (2, 8), (3, 1)], tree, 2)])).unwrap()
    }

    #[test]
    fn the_reader_keeps_the_tree_and_its_losses() {
        let p = profile();
        let t = &p.threads[0];
        assert_eq!(t.calltree.len(), 5);
        assert_eq!(
            t.calltree[4],
            CallNode { parent: Some(3), point: 2, calls: 5, cpu_ticks: 500, wall_ticks: 500, ..CallNode::default() }
        );
        assert_eq!(t.calltree_lost, 2);
    }

    #[test]
    fn a_root_that_never_returned_is_open() {
        let meta = synthetic_meta("cp", &[("_start", "0x10"), ("main", "0x20")]);
        let n = |parent: Option<u32>, point, wall| SyntheticNode { parent, point, calls: 1, cpu: wall, wall };
        let p =
            parse(&write_synthetic_with_trees(&meta, &[(7, vec![(0, 1)], vec![n(None, 0, 0), n(Some(0), 1, 500)], 0)]))
                .unwrap();
        let text = to_calltree_table(&p, &TreeOptions::default());
        let start = text.lines().find(|l| l.ends_with("_start")).unwrap();
        assert_eq!(
            start.split_whitespace().collect::<Vec<_>>(),
            ["1", "open", "open", "open", "open", "open", "_start"]
        );
        let main = text.lines().find(|l| l.ends_with("main")).unwrap();
        assert!(main.contains("100.0"), "main has all of the thread's time: {text}");
        assert!(text.contains("open: none of its calls"), "{text}");
    }

    #[test]
    fn a_corrupt_tree_is_a_one_line_error() {
        let meta = synthetic_meta("cp", &[("main", "0x10"), ("a", "0x20")]);
        let n = |parent: Option<u32>, point| SyntheticNode { parent, point, calls: 1, cpu: 0, wall: 0 };
        for (tree, what) in [
            (vec![n(None, 0), n(Some(1), 1)], "names point 1 under node 1"),
            (vec![n(None, 0), n(Some(0), 9)], "names point 9 under node 0"),
        ] {
            let e = parse(&write_synthetic_with_trees(&meta, &[(7, vec![(0, 1)], tree, 0)])).unwrap_err().to_string();
            assert!(e.contains(what) && !e.contains('\n'), "{e}");
        }
    }

    #[test]
    fn self_time_sums_over_a_functions_nodes() {
        let p = profile();
        let s = self_by_function(&p, &p.threads[0]).unwrap();
        assert_eq!(s["main"], (100, 1100));
        assert_eq!(s["a"], (100, 100));
        assert_eq!(s["b"], (700, 700));
        assert_eq!(s["c"], (100, 100));
    }

    #[test]
    fn callers_of_b_are_a_and_c() {
        let p = profile();
        let r = relatives(&p, &p.threads[0], "b", true).unwrap();
        assert_eq!(r.calls, 8);
        assert_eq!(r.rows.len(), 2);
        assert_eq!(r.rows["a"], (3, 200, 200));
        assert_eq!(r.rows["c"], (5, 500, 500));
        let text = to_relatives_table(&p, "b", true, &TreeOptions::default());
        assert!(text.contains("b: 8 calls"), "{text}");
    }

    #[test]
    fn callees_of_main_are_a_and_c() {
        let p = profile();
        let r = relatives(&p, &p.threads[0], "main", false).unwrap();
        assert_eq!(r.rows.keys().collect::<Vec<_>>(), ["a", "c"]);
        assert_eq!(r.rows["c"], (1, 600, 600));
        assert_eq!(relatives(&p, &p.threads[0], "nope", false), None);
    }

    #[test]
    fn tree_table_nests_and_folds() {
        let p = profile();
        let text = to_calltree_table(&p, &TreeOptions::default());
        let lines: Vec<&str> =
            text.lines().filter(|l| l.ends_with(" b") || l.ends_with(" c") || l.ends_with(" a")).collect();
        // c (600 cpu) before a (300), each with b under it, indented one more level.
        assert_eq!(lines.len(), 4, "{text}");
        assert!(lines[0].ends_with("  c") && lines[1].ends_with("    b"), "{text}");
        assert!(text.contains("calls not in the tree"), "{text}");
        assert!(!text.contains("open"), "{text}");
        let folded = to_calltree_table(&p, &TreeOptions { depth: Some(2), ..Default::default() });
        assert!(folded.contains("(2 deeper nodes folded"), "{folded}");
        assert!(!folded.lines().any(|l| l.ends_with("    b")), "{folded}");
    }

    #[test]
    fn width_shortens_long_names_keeping_their_indentation() {
        let long = format!("ns::{}::leaf", "x".repeat(80));
        let meta = synthetic_meta("cp", &[("main", "0x10"), (long.as_str(), "0x20")]);
        let n = |parent: Option<u32>, point| SyntheticNode { parent, point, calls: 1, cpu: 10, wall: 10 };
        let p =
            parse(&write_synthetic_with_trees(&meta, &[(7, vec![(0, 1), (1, 1)], vec![n(None, 0), n(Some(0), 1)], 0)]))
                .unwrap();
        let wide = to_calltree_table(&p, &TreeOptions::default());
        assert!(wide.contains(&long), "{wide}");
        let text = to_calltree_table(&p, &TreeOptions { width: Some(80), ..Default::default() });
        let row = text.lines().find(|l| l.ends_with("::leaf")).unwrap();
        assert_eq!(row.chars().count(), 80, "{text}");
        assert!(row.contains("  ns::x") && row.contains('…'), "indented, cut in the middle: {row}");
        let callees = to_relatives_table(&p, "main", false, &TreeOptions { width: Some(60), ..Default::default() });
        let row = callees.lines().find(|l| l.ends_with("::leaf")).unwrap();
        assert_eq!(row.chars().count(), 60, "{callees}");
    }
}
