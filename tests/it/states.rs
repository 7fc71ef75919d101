//! Thread states on and off a CPU (issue 12): `testbins/states.c` runs a thread that sleeps
//! 300 ms in `nanosleep` and one that spins for 300 ms of CPU. Both are in RUN (outside every
//! wrapped thread-library call) all their life; the kernel's schedstat, which the runtime
//! records as each thread ends, splits RUN into on a CPU, off a CPU and waiting for a CPU.
//!
//! | thread | bound |
//! | --- | --- |
//! | sleeper | OFFCPU% ≥ 95 |
//! | spinner | CPU% + RUNQ% ≥ 95 (on a machine shared with other work a spinning thread waits for a CPU too; CPU% alone ≥ 95 only on an idle one), OFFCPU% ≤ 5 |
//!
//! `report --by thread` shows the split as CPU%, OFFCPU% and RUNQ% columns; the JSON has the
//! same shares and their ns under each thread's `run_split` (`the_json_has_the_split_the_table_shows`).
//! The main thread returns from `main` and never ends like the others: the runtime reads its
//! schedstat in the `__libc_start_main` main thunk as `main` returns
//! (`the_main_thread_has_the_split_when_main_returns`).

use crate::common::*;
use serde_json::Value;

/// (CPU%, OFFCPU%, RUNQ%) of the thread whose first function is `first`, from the table.
fn split_of(table: &str, first: &str) -> (f64, f64, f64) {
    let head = table.lines().find(|l| l.trim_start().starts_with("tid ")).unwrap_or_else(|| panic!("{table}"));
    let cols: Vec<&str> = head.split("  ").map(str::trim).filter(|c| !c.is_empty()).collect();
    let at = |name: &str| cols.iter().position(|c| *c == name).unwrap_or_else(|| panic!("no {name} column: {table}"));
    let row = table.lines().find(|l| l.contains(first)).unwrap_or_else(|| panic!("no row for {first}: {table}"));
    let cells: Vec<&str> = row.split("  ").map(str::trim).filter(|c| !c.is_empty()).collect();
    let num = |name: &str| -> f64 {
        cells.get(at(name)).and_then(|c| c.parse().ok()).unwrap_or_else(|| panic!("{name} of {first}: {row}"))
    };
    (num("CPU%"), num("OFFCPU%"), num("RUNQ%"))
}

struct Run2 {
    table: String,
    doc: Value,
}

fn run() -> &'static Run2 {
    static R: std::sync::OnceLock<Run2> = std::sync::OnceLock::new();
    R.get_or_init(|| {
        let _turn = cpu_turn();
        let p = program("states");
        let bin = build(&p, Variant::PieO2);
        let dir = fresh_dir("states");
        let rewritten = dir.join("states");
        rewrite(&bin, &rewritten);
        let prof = dir.join("states.stint");
        let o = Run::new(&bin, &dir).run();
        let r = Run::new(&rewritten, &dir).env("STINT_PROFILE", path_str(&prof)).run();
        assert!(r.same_behaviour(&o), "{}", describe_difference("original", &o, "rewritten", &r));
        let t = stint(&["report", path_str(&prof), "--by", "thread"]);
        assert_eq!(t.status, 0, "{}", t.stderr_str());
        Run2 { table: t.stdout_str(), doc: report_json(&prof) }
    })
}

#[test]
fn a_sleeping_thread_is_off_cpu() {
    let r = run();
    let (_, off, _) = split_of(&r.table, "sleeper");
    assert!(off >= 95.0, "sleeper: OFFCPU% {off} < 95:\n{}", r.table);
}

#[test]
fn a_spinning_thread_is_on_cpu_or_waiting_for_one() {
    let r = run();
    let (cpu, off, runq) = split_of(&r.table, "spinner");
    assert!(cpu + runq >= 95.0 && off <= 5.0, "spinner: CPU% {cpu} RUNQ% {runq} OFFCPU% {off}:\n{}", r.table);
    assert!(cpu > 0.0, "spinner: CPU% {cpu}:\n{}", r.table);
}

#[test]
fn the_split_adds_up_to_run() {
    let r = run();
    assert_eq!(threads(&r.doc).len(), 3, "{}", r.table);
    for first in ["sleeper", "spinner"] {
        let (cpu, off, runq) = split_of(&r.table, first);
        let head = r.table.lines().find(|l| l.trim_start().starts_with("tid ")).unwrap();
        let cols: Vec<&str> = head.split("  ").map(str::trim).filter(|c| !c.is_empty()).collect();
        let row = r.table.lines().find(|l| l.contains(first)).unwrap();
        let cells: Vec<&str> = row.split("  ").map(str::trim).filter(|c| !c.is_empty()).collect();
        let run: f64 = cells[cols.iter().position(|c| *c == "RUN%").unwrap()].parse().unwrap();
        assert!((cpu + off + runq - run).abs() <= 0.2, "{first}: {cpu} + {off} + {runq} != RUN% {run}:\n{}", r.table);
    }
}

#[test]
fn the_json_has_the_split_the_table_shows() {
    let r = run();
    for first in ["sleeper", "spinner"] {
        let (cpu, off, runq) = split_of(&r.table, first);
        let t = threads(&r.doc)
            .iter()
            .find(|t| t["first_function"] == first)
            .unwrap_or_else(|| panic!("no thread of {first} in {}", r.doc));
        let s = &t["run_split"];
        let pct = |k: &str| s[k].as_f64().unwrap_or_else(|| panic!("{first}: run_split.{k}: {s}"));
        for (k, shown) in [("cpu_pct", cpu), ("offcpu_pct", off), ("runq_pct", runq)] {
            assert!((pct(k) - shown).abs() <= 0.051, "{first}: {k} {} but the table shows {shown}", pct(k));
        }
        let ns = |k: &str| s[k].as_u64().unwrap_or_else(|| panic!("{first}: run_split.{k}: {s}"));
        let run = t["states"]["RUN"].as_u64().unwrap_or_else(|| panic!("{first}: states.RUN: {t}"));
        let sum = ns("on_cpu_ns") + ns("off_cpu_ns") + ns("run_queue_ns");
        assert!(sum.abs_diff(run) <= 3, "{first}: the split's ns {sum} are not RUN's {run}: {s}");
    }
}

#[test]
fn the_main_thread_has_the_split_when_main_returns() {
    let r = run();
    let t = threads(&r.doc).iter().find(|t| t["main"] == true).unwrap_or_else(|| panic!("no main thread in {}", r.doc));
    let s = &t["run_split"];
    let ns = |k: &str| s[k].as_u64().unwrap_or_else(|| panic!("main: run_split.{k}: {t}"));
    let run = t["states"]["RUN"].as_u64().unwrap_or_else(|| panic!("main: states.RUN: {t}"));
    let sum = ns("on_cpu_ns") + ns("off_cpu_ns") + ns("run_queue_ns");
    assert!(sum.abs_diff(run) <= 3, "main: the split's ns {sum} are not RUN's {run}: {s}");
    assert!(ns("on_cpu_ns") > 0, "main: no time on a CPU: {s}");
}
