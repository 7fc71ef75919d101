//! Rendering a [`Profile`] for people and for programs: the table `stint report` prints and the
//! JSON of `stint report --format json`.
//!
//! The JSON is a stable contract (`stint-profile/1`): later versions add fields, never remove
//! or change one.
//!
//! ```json
//! {"schema": "stint-profile/1", "program": "pigz", "pid": 1234, "ppid": 1, "fork_child": false,
//!  "threads": [{"tid": 1235, "name": null, "start_routine": null, "first_function": "worker",
//!               "main": false,
//!               "functions": [{"name": "mid", "address": "0x1189", "calls": 1000}]}],
//!  "skipped_reentrant": 0, "lost_threads": 0}
//! ```
//!
//! Threads come in column order (registration order). Functions are named as D14 says, by the
//! names the rewriter put in the meta; a function reached through several points appears once
//! with their calls summed. Only functions a thread called are listed, most calls first.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde_json::{json, Value};

use crate::profile::{Profile, ThreadProfile};

/// `schema` of the JSON report.
pub const SCHEMA: &str = "stint-profile/1";

/// Calls of one function on one thread.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FunctionCalls {
    /// Function name from the meta (`point N` for a point the meta does not name).
    pub name: String,
    /// The function's address as the meta gives it.
    pub address: String,
    pub calls: u64,
    /// Inclusive CPU and wall time in ns; `None` if the function is not timed (or the file
    /// has no TSC calibration).
    pub cpu_ns: Option<u64>,
    pub wall_ns: Option<u64>,
}

/// The functions thread `t` called, one row per (name, address), by calls descending, then
/// name, then address.
pub fn functions(p: &Profile, t: &ThreadProfile) -> Vec<FunctionCalls> {
    // (calls, cpu ticks, wall ticks, timed)
    let mut sums: BTreeMap<(String, String), (u64, u64, u64, bool)> = BTreeMap::new();
    let key = |point: u32| match p.point(point) {
        Some(pm) => (pm.function.clone(), pm.address.clone()),
        None => (format!("point {point}"), String::new()),
    };
    for &(point, calls) in &t.counts {
        if calls == 0 {
            continue;
        }
        let sum = sums.entry(key(point)).or_default();
        sum.0 = sum.0.saturating_add(calls);
        sum.3 |= p.timed(point);
    }
    for &(point, cpu, wall) in &t.times {
        let sum = sums.entry(key(point)).or_default();
        sum.1 = sum.1.saturating_add(cpu);
        sum.2 = sum.2.saturating_add(wall);
        sum.3 = true;
    }
    let mut rows: Vec<_> = sums
        .into_iter()
        .map(|((name, address), (calls, cpu, wall, timed))| FunctionCalls {
            name,
            address,
            calls,
            cpu_ns: if timed { p.ticks_to_ns(cpu) } else { None },
            wall_ns: if timed { p.ticks_to_ns(wall) } else { None },
        })
        .collect();
    // The map is sorted by (name, address) and the sort is stable.
    rows.sort_by_key(|f| std::cmp::Reverse(f.calls));
    rows
}

/// Name of the function of the thread's first point.
pub fn first_function<'a>(p: &'a Profile, t: &ThreadProfile) -> Option<&'a str> {
    t.first_point.and_then(|id| p.point(id)).map(|pm| pm.function.as_str())
}

/// The thread's start routine: the name of the function at that address if some point names
/// it, else the address in hex.
pub fn start_routine(p: &Profile, t: &ThreadProfile) -> Option<String> {
    let addr = t.start_routine?;
    Some(match p.points.iter().find(|pm| pm.address_value() == Some(addr)) {
        Some(pm) => pm.function.clone(),
        None => format!("{addr:#x}"),
    })
}

/// The `stint-profile/1` JSON of a profile.
pub fn to_json(p: &Profile) -> Value {
    let threads: Vec<Value> = p
        .threads
        .iter()
        .map(|t| {
            let functions: Vec<Value> = functions(p, t)
                .into_iter()
                .map(|f| {
                    json!({"name": f.name, "address": f.address, "calls": f.calls, "cpu_ns": f.cpu_ns, "wall_ns": f.wall_ns})
                })
                .collect();
            json!({
                "tid": t.tid,
                "name": t.name,
                "start_routine": start_routine(p, t),
                "first_function": first_function(p, t),
                "main": t.is_main(p),
                "clock_source": t.clock_source,
                "timer_skipped": t.timer_skipped,
                "unmatched_exits": t.unmatched_exits,
                "abandoned_frames": t.abandoned_frames,
                "shadow_overflow": t.shadow_overflow,
                "resyncs": t.resyncs,
                "functions": functions,
            })
        })
        .collect();
    json!({
        "schema": SCHEMA,
        "program": p.program,
        "pid": p.pid,
        "ppid": p.ppid,
        "fork_child": p.fork_child(),
        "threads": threads,
        "skipped_reentrant": p.skipped_reentrant,
        "lost_threads": p.lost_threads,
        "tsc_hz": p.tsc_hz,
    })
}

/// How much of the profile the table shows.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TableOptions {
    /// At most this many functions per thread (the rest are summed in one line); all if `None`.
    pub top: Option<usize>,
}

/// The whole profile as a table.
pub fn to_table(p: &Profile) -> String {
    to_table_with(p, &TableOptions::default())
}

/// Narrowest function column, so short names still line up under the heading.
const MIN_FUNCTION_WIDTH: usize = 18;
/// Widest function column; longer names (C++) push their address to the right.
const MAX_FUNCTION_WIDTH: usize = 48;

/// The profile as a table: a line about the process, then per thread a heading and its
/// functions, then the totals.
///
/// ```text
/// program pigz  pid 1234  threads 2  (skipped reentrant events: 0)
///
/// thread 1234 (main)
///   calls  function            address
///       1  main                0x1139
///
/// thread 1235  first: worker
///   calls  function            address
///    1000  mid                 0x11c0
///
/// total: 2 threads, 1001 calls
/// ```
pub fn to_table_with(p: &Profile, opts: &TableOptions) -> String {
    struct Section {
        heading: String,
        shown: Vec<FunctionCalls>,
        /// Functions left out by `top`, and their calls.
        hidden: (usize, u64),
    }
    let sections: Vec<Section> = p
        .threads
        .iter()
        .map(|t| {
            let mut shown = functions(p, t);
            let keep = opts.top.unwrap_or(usize::MAX).min(shown.len());
            let rest = shown.split_off(keep);
            let hidden = (rest.len(), rest.iter().fold(0u64, |s, f| s.saturating_add(f.calls)));
            Section { heading: thread_heading(p, t), shown, hidden }
        })
        .collect();

    // Timer columns only when some function is timed: call-count-only profiles keep the
    // narrow table.
    let timed = sections.iter().flat_map(|s| &s.shown).any(|f| f.wall_ns.is_some() || f.cpu_ns.is_some());
    let widest_calls = sections.iter().flat_map(|s| s.shown.iter().map(|f| f.calls).chain([s.hidden.1])).max();
    let calls_w = widest_calls.unwrap_or(0).to_string().len().max("calls".len());
    let names_w = sections.iter().flat_map(|s| &s.shown).map(|f| f.name.chars().count()).max().unwrap_or(0);
    let name_w = names_w.clamp(MIN_FUNCTION_WIDTH, MAX_FUNCTION_WIDTH);

    let mut out = String::new();
    let _ = write!(out, "program {}  pid {}", p.program, p.pid);
    if p.fork_child() {
        let _ = write!(out, " (forked from {})", p.ppid);
    }
    let _ = write!(out, "  threads {}  (skipped reentrant events: {})", p.threads.len(), p.skipped_reentrant);
    if p.lost_threads != 0 {
        let _ = write!(out, "  (threads without a column: {})", p.lost_threads);
    }
    out.push('\n');

    for s in &sections {
        let _ = write!(out, "\n{}\n", s.heading);
        if s.shown.is_empty() && s.hidden.0 == 0 {
            out.push_str("  (no calls)\n");
            continue;
        }
        let times = |f: &FunctionCalls| -> String {
            if !timed {
                return String::new();
            }
            let per_call = f.cpu_ns.filter(|_| f.calls > 0).map(|c| c as f64 / f.calls as f64 / 1e3);
            format!(
                "{:>11}  {:>11}  {:>10}  ",
                f.cpu_ns.map_or("-".into(), |n| format!("{:.3}", n as f64 / 1e6)),
                f.wall_ns.map_or("-".into(), |n| format!("{:.3}", n as f64 / 1e6)),
                per_call.map_or("-".into(), |us| format!("{us:.3}")),
            )
        };
        let head =
            if timed { format!("{:>11}  {:>11}  {:>10}  ", "cpu ms", "wall ms", "cpu/call us") } else { String::new() };
        let _ = writeln!(out, "  {:>calls_w$}  {head}{:<name_w$}  address", "calls", "function");
        for f in &s.shown {
            let line = format!("  {:>calls_w$}  {}{:<name_w$}  {}", f.calls, times(f), f.name, f.address);
            let _ = writeln!(out, "{}", line.trim_end());
        }
        if s.hidden.0 > 0 {
            let more = if s.hidden.0 == 1 { "function" } else { "functions" };
            let _ = writeln!(out, "  {:>calls_w$}  ({} more {more})", s.hidden.1, s.hidden.0);
        }
    }
    let _ = write!(out, "\ntotal: {} threads, {} calls\n", p.threads.len(), p.total_calls());
    if timed {
        let sources: std::collections::BTreeSet<&str> =
            p.threads.iter().filter_map(|t| t.clock_source.as_deref()).collect();
        let sources: Vec<&str> = sources.into_iter().collect();
        let sum = |f: fn(&ThreadProfile) -> u64| p.threads.iter().fold(0u64, |s, t| s.saturating_add(f(t)));
        let _ = writeln!(
            out,
            "times: inclusive; cpu clock: {}; frames closed after exception/longjmp: {}; timer events skipped in signal handlers: {}",
            if sources.is_empty() { "-".to_string() } else { sources.join(", ") },
            sum(|t| t.abandoned_frames),
            sum(|t| t.timer_skipped),
        );
    }
    out
}

/// `thread 1236  name: compress  start: compress_thread  first: worker`, or
/// `thread 1234 (main)`.
fn thread_heading(p: &Profile, t: &ThreadProfile) -> String {
    let mut h = format!("thread {}", t.tid);
    if t.is_main(p) {
        h.push_str(" (main)");
    }
    if let Some(name) = &t.name {
        let _ = write!(h, "  name: {name}");
    }
    if let Some(start) = start_routine(p, t) {
        let _ = write!(h, "  start: {start}");
    }
    if !t.is_main(p) {
        if let Some(first) = first_function(p, t) {
            let _ = write!(h, "  first: {first}");
        }
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::{load, parse, patch_column, patch_header, synthetic_meta, write_synthetic};
    use stint_layout::{COLUMN_EMPTY, FLAG_FORK_CHILD};

    /// Point 4 is a second entry of `mid` (same name and address): its calls add to point 2's.
    fn meta() -> String {
        synthetic_meta(
            "pigz",
            &[("main", "0x1139"), ("worker", "0x1189"), ("mid", "0x11c0"), ("leaf", "0x1200"), ("mid", "0x11c0")],
        )
    }

    /// main thread 1234, two workers, a thread that called nothing, and an unpublished column.
    fn sample_file() -> Vec<u8> {
        let mut b = write_synthetic(
            &meta(),
            &[
                (1234, vec![(0, 1), (1, 2)]),
                (1235, vec![(1, 1), (2, 993), (3, 500), (4, 7)]),
                (1236, vec![(1, 1), (3, 2000), (2, 500)]),
                (1237, vec![]),
                (1238, vec![(0, 99)]),
            ],
        );
        patch_column(&mut b, 2, |c| {
            c.name[..8].copy_from_slice(b"compress");
            c.start_routine = 0x1189;
        });
        patch_column(&mut b, 3, |c| c.start_routine = 0xdead0);
        patch_column(&mut b, 4, |c| c.state = COLUMN_EMPTY);
        b
    }

    fn sample() -> Profile {
        let path = std::env::temp_dir().join(format!("stint-report-test-{}.stint", std::process::id()));
        std::fs::write(&path, sample_file()).unwrap();
        let p = load(&path);
        let _ = std::fs::remove_file(&path);
        p.unwrap()
    }

    #[test]
    fn json_contract() {
        let mut expected = json!({
            "schema": "stint-profile/1", "program": "pigz", "pid": 1234, "ppid": 1, "fork_child": false,
            "threads": [
                {"tid": 1234, "name": null, "start_routine": null, "first_function": "main", "main": true,
                 "functions": [{"name": "worker", "address": "0x1189", "calls": 2},
                               {"name": "main", "address": "0x1139", "calls": 1}]},
                {"tid": 1235, "name": null, "start_routine": null, "first_function": "worker", "main": false,
                 "functions": [{"name": "mid", "address": "0x11c0", "calls": 1000},
                               {"name": "leaf", "address": "0x1200", "calls": 500},
                               {"name": "worker", "address": "0x1189", "calls": 1}]},
                {"tid": 1236, "name": "compress", "start_routine": "worker", "first_function": "worker",
                 "main": false,
                 "functions": [{"name": "leaf", "address": "0x1200", "calls": 2000},
                               {"name": "mid", "address": "0x11c0", "calls": 500},
                               {"name": "worker", "address": "0x1189", "calls": 1}]},
                {"tid": 1237, "name": null, "start_routine": "0xdead0", "first_function": null, "main": false,
                 "functions": []},
            ],
            "skipped_reentrant": 0, "lost_threads": 0,
        });
        // Timer fields of a profile without timed points: counters zero, times null.
        for t in expected["threads"].as_array_mut().unwrap() {
            for (k, v) in [
                ("clock_source", json!(null)),
                ("timer_skipped", json!(0)),
                ("unmatched_exits", json!(0)),
                ("abandoned_frames", json!(0)),
                ("shadow_overflow", json!(0)),
                ("resyncs", json!(0)),
            ] {
                t[k] = v;
            }
            for f in t["functions"].as_array_mut().unwrap() {
                f["cpu_ns"] = json!(null);
                f["wall_ns"] = json!(null);
            }
        }
        expected["tsc_hz"] = json!(0);
        assert_eq!(to_json(&sample()), expected);
    }

    #[test]
    fn json_of_a_forked_child_with_lost_threads() {
        let mut b = sample_file();
        patch_header(&mut b, |h| {
            h.flags |= FLAG_FORK_CHILD;
            h.ppid = 1200;
            h.skipped_reentrant = 5;
            h.lost_threads = 2;
        });
        let v = to_json(&parse(&b).unwrap());
        assert_eq!((&v["fork_child"], &v["ppid"]), (&json!(true), &json!(1200)));
        assert_eq!((&v["skipped_reentrant"], &v["lost_threads"]), (&json!(5), &json!(2)));
    }

    #[test]
    fn equal_calls_sort_by_name() {
        let b = write_synthetic(&meta(), &[(7, vec![(3, 5), (1, 5), (0, 5)])]);
        let names: Vec<_> =
            functions(&parse(&b).unwrap(), &parse(&b).unwrap().threads[0]).into_iter().map(|f| f.name).collect();
        assert_eq!(names, ["leaf", "main", "worker"]);
    }

    #[test]
    fn table() {
        insta::assert_snapshot!(to_table(&sample()));
    }

    #[test]
    fn table_top() {
        let mut b = sample_file();
        patch_header(&mut b, |h| {
            h.flags |= FLAG_FORK_CHILD;
            h.ppid = 1200;
            h.lost_threads = 1;
        });
        insta::assert_snapshot!(to_table_with(&parse(&b).unwrap(), &TableOptions { top: Some(1) }));
    }

    #[test]
    fn table_of_an_empty_profile() {
        let p = parse(&write_synthetic(&meta(), &[])).unwrap();
        assert_eq!(
            to_table(&p),
            "program pigz  pid 4242  threads 0  (skipped reentrant events: 0)\n\ntotal: 0 threads, 0 calls\n"
        );
    }

    #[test]
    fn long_names_widen_the_column_up_to_a_limit() {
        let long = "std::vector<int>::push_back(int const&)";
        let longer = "x".repeat(60);
        let meta = synthetic_meta("p", &[(long, "0x10"), (&longer, "0x20")]);
        let b = write_synthetic(&meta, &[(1, vec![(0, 3), (1, 2)])]);
        let t = to_table(&parse(&b).unwrap());
        assert!(t.contains(&format!("      3  {long:<48}  0x10\n")), "{t}");
        assert!(t.contains(&format!("      2  {longer}  0x20\n")), "{t}");
    }
}
