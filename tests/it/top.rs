//! `stint top` and `stint ls` against real and synthetic profiles.
//!
//! | test | what it checks |
//! | --- | --- |
//! | `live_program_in_top_and_ls::*` | `testbins/top_spin.c` rewritten and running, observed once: `top --once --interval 0.3` has its `header`, one row per live task in `threads` (with `spin-a`, `spin-b`), `work` with calls in `top_functions`, a mutex in `lock_waits`; OFFCPU% and RUNQ% of the spinning threads lie within their RUN% (`run_split_columns`); `ls --json` and `ls` list the pid, path and program (`ls_json_while_running`, `ls_table_while_running`); `after_exit`, `top --once` shows it ended and `ls` no longer lists it |
//! | `synthetic_profile_frame` | a profile written by `stint_profile::synthetic::write_synthetic` (a pid no process has): the exact frame of `top --once --interval 0`, `--thread` |
//! | `errors_name_the_file` | a missing file, a file that is no profile, a truncated profile, an unknown `--thread`, and no terminal without `--once`: exit 2, one line on stderr |
//! | `help_has_examples` | `top --help` and `ls --help` |
//!
//! The `--once` text is read the way a script would: a section starts at its title line
//! (`THREADS`, `TOP FUNCTIONS`, `LOCK WAITS`) and ends at a blank line; its first line is
//! the heading (one word per column), every cell but the last column's has no blanks.
//! The live observation holds the CPU turn (`common::cpu_turn`) while its program runs.

use crate::common::*;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

/// The heading and rows of section `title` of a `--once` frame; `None` if the section
/// says it is empty (one line in parentheses).
fn section<'a>(text: &'a str, title: &str) -> Option<(Vec<&'a str>, Vec<&'a str>)> {
    let mut lines = text.lines().skip_while(|l| *l != title);
    assert_eq!(lines.next(), Some(title), "no section {title}:\n{text}");
    let body: Vec<&str> = lines.take_while(|l| !l.is_empty()).collect();
    assert!(!body.is_empty(), "section {title} has no lines:\n{text}");
    if body.len() == 1 && body[0].starts_with('(') {
        return None;
    }
    Some((body[0].split_whitespace().collect(), body[1..].to_vec()))
}

/// Cell `column` (by heading) of a row; columns before the last hold no blanks.
fn cell<'a>(head: &[&str], row: &'a str, column: &str) -> &'a str {
    let i = head.iter().position(|h| *h == column).unwrap_or_else(|| panic!("no column {column} in {head:?}"));
    let cells: Vec<&str> = row.split_whitespace().collect();
    if i + 1 == head.len() {
        // The last column may hold blanks: everything after the cells before it.
        let mut rest = row;
        for c in &cells[..i] {
            rest = rest.trim_start().strip_prefix(c).unwrap_or_else(|| panic!("{row:?}: bad row"));
        }
        return rest.trim();
    }
    cells.get(i).copied().unwrap_or_else(|| panic!("row {row:?} has no column {column}"))
}

/// Kills the program if the test fails while it runs.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn tasks(pid: u32) -> BTreeSet<u32> {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .map(|d| d.flatten().filter_map(|e| e.file_name().to_str()?.parse().ok()).collect())
        .unwrap_or_default()
}

fn top_once(profile: &Path, interval: &str) -> Outcome {
    let o = stint(&["top", path_str(profile), "--once", "--interval", interval]);
    assert!(o.status == 0 && o.stderr.is_empty(), "stint top --once {}: {o:?}", profile.display());
    assert!(!o.stdout.contains(&0x1b), "escape codes in --once output: {o:?}");
    o
}

fn ls_json() -> Vec<serde_json::Value> {
    let o = stint(&["ls", "--json"]);
    assert!(o.status == 0, "stint ls --json: {o:?}");
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {o:?}"));
    v.as_array().unwrap_or_else(|| panic!("not an array: {o:?}")).clone()
}

/// What `top` and `ls` showed of `testbins/top_spin.c`, rewritten and running, and after
/// it ended: observed once, checked by the tests of `live_program_in_top_and_ls`.
struct Live {
    pid: u32,
    profile: PathBuf,
    /// Tasks of the process before and after the `--once` frame.
    before: BTreeSet<u32>,
    after: BTreeSet<u32>,
    /// `top --once --interval 0.3` while it runs.
    text: String,
    /// Seconds that `top --once --interval 0.3` took, measured here.
    top_secs: f64,
    /// `ls --json` and `ls` while it runs.
    listed: Vec<serde_json::Value>,
    table: Outcome,
    status: ExitStatus,
    /// `top --once --interval 0.1` after it ended.
    ended: String,
    /// `ls --json` after it ended.
    listed_after: Vec<serde_json::Value>,
    /// `report --format json` while it runs, and the ms from the workers' registration to the
    /// start of that reading and from the spawn to its end (bounds of main's open frame).
    report_live: serde_json::Value,
    main_open_ms: (f64, f64),
    /// `report` (the table) while it runs.
    report_table: String,
}

/// Run `top_spin` (under the CPU turn) and observe it, once per test process.
fn live() -> Arc<Live> {
    static LIVE: RunCache<(), Live> = OnceLock::new();
    cached_run(&LIVE, (), "top_spin pie-O2 live", observe_live)
}

fn observe_live() -> Live {
    let _turn = cpu_turn();
    let p = program("top_spin");
    let bin = build(&p, Variant::PieO2);
    let dir = fresh_dir("top-live");
    let exe = dir.join("top_spin");
    rewrite(&bin, &exe);
    let child = Command::new(&exe)
        .arg("-") // until SIGUSR1: the checks below take seconds under load
        .env("STINT_PROFILE", profile_template(&dir, "top_spin"))
        .env_remove("STINT_CONTROL")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{}: cannot start: {e}", exe.display()));
    let spawned = Instant::now();
    let mut running = Running(child);
    let pid = running.0.id();
    let profile = dir.join(format!("top_spin.{pid}.stint"));

    // Until both workers have registered and named themselves.
    let start = Instant::now();
    loop {
        if profile.exists() {
            let o = stint(&["top", path_str(&profile), "--once", "--interval", "0"]);
            let text = o.stdout_str();
            if o.status == 0 && text.contains(" spin-a\n") && text.contains(" spin-b\n") {
                break;
            }
        }
        assert!(start.elapsed() < Duration::from_secs(10), "top_spin's workers are not in {}", profile.display());
        std::thread::sleep(Duration::from_millis(20));
    }
    let registered = Instant::now();

    let before = tasks(pid);
    let top_start = Instant::now();
    let o = top_once(&profile, "0.3");
    let top_secs = top_start.elapsed().as_secs_f64();
    let after = tasks(pid);
    let text = o.stdout_str();

    // stint ls, while it runs.
    let listed = ls_json();
    let table = stint(&["ls"]);

    // stint report, while main waits in the join and the workers spin: their frames are open.
    std::thread::sleep(Duration::from_millis(200));
    let read_start = Instant::now();
    let report_live = report_json(&profile);
    let main_open_ms =
        (read_start.duration_since(registered).as_secs_f64() * 1e3, spawned.elapsed().as_secs_f64() * 1e3);
    let report_table = stint(&["report", path_str(&profile)]).stdout_str();

    // After the exit, which SIGUSR1 asks for.
    // Safety: kill(2) on our own child, which has not been waited for (so the pid is its).
    assert_eq!(unsafe { libc::kill(pid as i32, libc::SIGUSR1) }, 0, "kill -USR1 {pid}");
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(s) = running.0.try_wait().expect("wait") {
            break s;
        }
        assert!(Instant::now() < deadline, "top_spin still runs after 60 s");
        std::thread::sleep(Duration::from_millis(20));
    };
    let ended = top_once(&profile, "0.1").stdout_str();
    let listed_after = ls_json();
    Live {
        pid,
        profile,
        before,
        after,
        text,
        top_secs,
        listed,
        table,
        status,
        ended,
        listed_after,
        report_live,
        main_open_ms,
        report_table,
    }
}

/// `testbins/top_spin.c` rewritten and running, then ended: one test per part of what
/// `top --once` and `ls` show.
mod live_program_in_top_and_ls {
    use super::*;

    #[test]
    fn header() {
        let l = live();
        let (pid, text) = (l.pid, &l.text);
        let header = text.lines().next().unwrap_or_default();
        assert!(
            header.starts_with(&format!("program top_spin  pid {pid}  running  uptime ")),
            "header {header:?}:\n{text}"
        );
        // The interval shown is the time between the two readings: at least the 0.3 s asked
        // for, longer on a loaded machine, and within the time the whole command took.
        let shown = text
            .lines()
            .find_map(|l| l.strip_prefix("interval ")?.split(" s ").next()?.parse::<f64>().ok())
            .unwrap_or_else(|| panic!("no `interval N s` line:\n{text}"));
        assert!(
            (0.3 - 0.005..=l.top_secs + 0.005).contains(&shown),
            "interval {shown} s, asked 0.3 s, the command took {:.3} s:\n{text}",
            l.top_secs
        );
    }

    #[test]
    fn threads() {
        let l = live();
        let (pid, text, before, after) = (l.pid, &l.text, &l.before, &l.after);
        let (head, rows) = section(text, "THREADS").expect("threads");
        assert_eq!(head[0], "TID");
        let tids: BTreeSet<u32> = rows.iter().map(|r| cell(&head, r, "TID").parse().expect("a tid")).collect();
        assert_eq!(rows.len(), tids.len(), "a thread listed twice:\n{text}");
        assert_eq!(before.len(), 3, "top_spin should run main and two workers: {before:?}");
        assert!(tids == *before && before == after, "THREADS {tids:?}, tasks of {pid}: {before:?} / {after:?}\n{text}");
        let names: BTreeSet<&str> = rows.iter().map(|r| cell(&head, r, "NAME")).collect();
        assert!(names.contains("spin-a") && names.contains("spin-b"), "names {names:?}\n{text}");
        for r in &rows {
            assert!(r.starts_with(&cell(&head, r, "TID").to_string()), "{r:?}");
            assert_ne!(cell(&head, r, "CPU%"), "-", "{r:?}: no CPU share over the interval\n{text}");
        }
        let main = rows.iter().find(|r| cell(&head, r, "TID") == pid.to_string()).expect("main thread row");
        assert_eq!(cell(&head, main, "STATE"), "BLOCKED_JOIN", "{text}");
    }

    #[test]
    fn run_split_columns() {
        let l = live();
        let text = &l.text;
        let (head, rows) = section(text, "THREADS").expect("threads");
        let num = |r: &str, c: &str| -> f64 {
            cell(&head, r, c).parse().unwrap_or_else(|_| panic!("{c} of {r:?} is no number:\n{text}"))
        };
        let spins: Vec<&&str> = rows.iter().filter(|r| matches!(cell(&head, r, "NAME"), "spin-a" | "spin-b")).collect();
        assert_eq!(spins.len(), 2, "{text}");
        for r in spins {
            // The kernel's split lies inside RUN (both shares of the interval's observed time).
            let (run, off, runq) = (num(r, "RUN%"), num(r, "OFFCPU%"), num(r, "RUNQ%"));
            assert!(off + runq <= run + 0.2, "{r:?}: OFFCPU% {off} + RUNQ% {runq} above RUN% {run}\n{text}");
        }
        assert!(text.contains("OFFCPU%: in RUN but off a CPU"), "legend:\n{text}");
    }

    #[test]
    fn top_functions() {
        let l = live();
        let text = &l.text;
        let (head, rows) = section(text, "TOP FUNCTIONS").expect("functions");
        let work =
            rows.iter().find(|r| cell(&head, r, "FUNCTION") == "work").unwrap_or_else(|| panic!("no work:\n{text}"));
        let calls: u64 = cell(&head, work, "CALLS").parse().expect("calls");
        assert!(calls > 0, "{work:?}");
        assert!(!["-", "0"].contains(&cell(&head, work, "CALLS/S")), "work has no calls in the interval: {work:?}");
        assert_ne!(cell(&head, work, "CPU-MS"), "-", "work is timed: {work:?}");
        assert!(rows.len() <= 10, "{text}");
    }

    #[test]
    fn lock_waits() {
        let l = live();
        let text = &l.text;
        let (head, rows) = section(text, "LOCK WAITS").unwrap_or_else(|| panic!("no lock waits:\n{text}"));
        let mutex =
            rows.iter().find(|r| cell(&head, r, "KIND") == "mutex").unwrap_or_else(|| panic!("no mutex:\n{text}"));
        assert!(cell(&head, mutex, "OBJECT").starts_with("0x"), "{mutex:?}");
        assert_eq!(cell(&head, mutex, "FIRST-USED-IN"), "spin", "{mutex:?}");
        // The global `m` of top_spin.c, named from the program's symbols (issue 11).
        assert_eq!(cell(&head, mutex, "NAME"), "m", "{mutex:?}");
        assert!(cell(&head, mutex, "CALLS").parse::<u64>().expect("calls") > 0, "{mutex:?}");
    }

    #[test]
    fn ls_json_while_running() {
        let l = live();
        let (pid, listed) = (l.pid, &l.listed);
        let mine: Vec<&serde_json::Value> = listed.iter().filter(|e| e["pid"] == pid).collect();
        assert_eq!(mine.len(), 1, "stint ls --json: {listed:?}");
        let e = mine[0];
        assert_eq!(e["path"], path_str(&l.profile), "{e}");
        assert_eq!(e["program"], "top_spin", "{e}");
        assert_eq!(e["alive"], true, "{e}");
        assert_eq!(e["threads"], 3, "{e}");
        assert_eq!(e["fork_child"], false, "{e}");
        assert!(e["ppid"].as_u64().is_some_and(|p| p == std::process::id() as u64), "{e}");
        assert!(e["uptime_s"].as_f64().is_some_and(|s| s > 0.0 && s < 60.0), "{e}");
        let pids: Vec<u64> = listed.iter().filter_map(|e| e["pid"].as_u64()).collect();
        assert!(pids.windows(2).all(|w| w[0] <= w[1]), "not sorted by pid: {pids:?}");
    }

    #[test]
    fn ls_table_while_running() {
        let l = live();
        let (pid, o) = (l.pid, &l.table);
        assert!(o.status == 0, "{o:?}");
        let table = o.stdout_str();
        assert!(table.starts_with("PID "), "{table}");
        let line = table.lines().find(|l| l.starts_with(&format!("{pid} "))).unwrap_or_else(|| panic!("{table}"));
        assert!(line.ends_with(path_str(&l.profile)) && line.contains(" top_spin "), "{line:?}");
    }

    /// A function of the thread's JSON report.
    fn function<'a>(t: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
        let fs = t["functions"].as_array().expect("functions");
        fs.iter().find(|f| f["name"] == name).unwrap_or_else(|| panic!("no {name} in {t}"))
    }

    #[test]
    fn open_frames_count_up_to_the_reading() {
        let l = live();
        let threads = l.report_live["threads"].as_array().expect("threads");
        let main = threads.iter().find(|t| t["tid"] == l.pid).expect("main thread");
        let f = function(main, "main");
        assert_eq!(f["running"], true, "main has not returned: {f}");
        // main was entered before the workers registered and read at the reading.
        let wall_ms = f["wall_ns"].as_u64().expect("main's wall time") as f64 / 1e6;
        let (lo, hi) = l.main_open_ms;
        assert!(wall_ms >= lo && wall_ms <= hi, "main's wall {wall_ms:.1} ms, not in [{lo:.1}, {hi:.1}]: {f}");
        // A function whose calls all returned is not marked: main's thread ran no other
        // timed function but _start and main still open.
        let marked: Vec<&str> = main["functions"]
            .as_array()
            .expect("functions")
            .iter()
            .filter(|f| f["running"] == true)
            .filter_map(|f| f["name"].as_str())
            .collect();
        assert_eq!(marked, ["_start", "main"], "{main}");
        // The spinning workers: their start routine runs, its CPU time counted, at most its wall time.
        let workers: Vec<_> = threads.iter().filter(|t| t["tid"] != l.pid).collect();
        assert_eq!(workers.len(), 2);
        for t in workers {
            let f = function(t, "spin");
            assert_eq!(f["running"], true, "{f}");
            let (cpu, wall) = (f["cpu_ns"].as_u64().expect("cpu"), f["wall_ns"].as_u64().expect("wall"));
            assert!(cpu > 0 && cpu <= wall, "spin: cpu {cpu} ns, wall {wall} ns: {f}");
        }
    }

    #[test]
    fn open_frames_marked_in_the_table() {
        let l = live();
        let table = &l.report_table;
        let head = table.lines().find(|r| r.trim_start().starts_with("calls ")).unwrap_or_else(|| panic!("{table}"));
        let cols: Vec<&str> = head.split("  ").map(str::trim).filter(|c| !c.is_empty()).collect();
        let at = |name: &str| cols.iter().position(|c| *c == name).unwrap_or_else(|| panic!("no {name}: {head:?}"));
        let main = table
            .lines()
            .find(|r| r.split_whitespace().nth(at("function")) == Some("main"))
            .unwrap_or_else(|| panic!("{table}"));
        let cells: Vec<&str> = main.split_whitespace().collect();
        assert!(
            cells[at("cpu ms")].ends_with('+')
                && cells[at("wall ms")].ends_with('+')
                && cells[at("cpu/call us")] == "-",
            "{main:?}\n{table}"
        );
        // The running call's time is in its call path too: main's self time is not zero.
        assert_ne!(cells[at("self wall ms")], "0.000", "{main:?}\n{table}");
        assert!(table.contains("\n+: includes a call still running when the profile was read"), "{table}");
        assert!(!table.contains("\nopen: "), "{table}");
    }

    #[test]
    fn after_exit() {
        let l = live();
        let (pid, status, text) = (l.pid, l.status, &l.ended);
        assert!(status.success(), "top_spin: {status}");
        assert!(text.starts_with(&format!("program top_spin  pid {pid}  ended  ")), "{text}");
        let (head, rows) = section(text, "THREADS").expect("threads");
        assert_eq!(rows.len(), 3, "{text}");
        assert!(rows.iter().all(|r| cell(&head, r, "CPU%") == "-"), "{text}");
        let (head, rows) = section(text, "TOP FUNCTIONS").expect("functions");
        assert!(rows.iter().any(|r| cell(&head, r, "FUNCTION") == "work"), "{text}");
        assert!(l.listed_after.iter().all(|e| e["pid"] != pid), "stint ls still lists {pid}");
    }
}

/// A synthetic profile of a process that does not exist: main, a named worker, a thread
/// without calls.
fn synthetic(dir: &Path) -> std::path::PathBuf {
    use crate::common::synthetic::{patch_column, synthetic_meta, write_synthetic};
    let pid = 4_000_000_000u32; // beyond any pid_max; the first thread is the main thread
    let meta = synthetic_meta("srv", &[("main", "0x1139"), ("worker", "0x1189"), ("leaf", "0x1200")]);
    let mut b = write_synthetic(
        &meta,
        &[(pid, vec![(0, 1)]), (pid + 1, vec![(1, 1), (2, 700)]), (pid + 2, vec![(1, 1), (2, 30)])],
    );
    patch_column(&mut b, 1, |c| c.name[..8].copy_from_slice(b"compress"));
    for i in 0..3 {
        patch_column(&mut b, i, |c| c.thread_mask = 0xff);
    }
    let path = dir.join("srv.stint");
    std::fs::write(&path, b).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    path
}

#[test]
fn synthetic_profile_frame() {
    let _share = cpu_share();
    let dir = fresh_dir("top-synthetic");
    let path = synthetic(&dir);
    let o = top_once(&path, "0");
    let want = "\
program srv  pid 4000000000  ended  last event at -  threads 0/3 live
metrics on: calls cpu_time wall_time lock_wait lock_hold state_trace  snapshot: none  control file: none
interval - (one reading: totals, no rates)  functions and lock waits of all threads, by calls

THREADS
TID         STATE  CPU%  RUN%  BLOCKED%  BLOCKED  CALLS/S  CALLS  NAME
4000000000  gone      -     -         -  -              -      1  -
4000000001  gone      -     -         -  -              -    701  compress
4000000002  gone      -     -         -  -              -     31  -

TOP FUNCTIONS
CALLS/S  CALLS  ADDRESS  FUNCTION
      -    730  0x1200   leaf
      -      2  0x1189   worker
      -      1  0x1139   main

LOCK WAITS
(no waits: lock_wait is off, or no wrapped thread-library call ran)

one reading: totals since the start; rates need two readings
";
    assert_eq!(o.stdout_str(), want);

    // One thread: its functions only.
    let o = stint(&["top", path_str(&path), "--once", "--interval", "0", "--thread", "4000000002"]);
    assert!(o.status == 0, "{o:?}");
    let text = o.stdout_str();
    assert!(text.contains("functions and lock waits of thread 4000000002, by calls"), "{text}");
    let (head, rows) = section(&text, "TOP FUNCTIONS").expect("functions");
    let got: Vec<(&str, &str)> = rows.iter().map(|r| (cell(&head, r, "FUNCTION"), cell(&head, r, "CALLS"))).collect();
    assert_eq!(got, [("leaf", "30"), ("worker", "1")]);
    // Two readings of an ended process: rates of nothing.
    let text = top_once(&path, "0.05").stdout_str();
    let (head, rows) = section(&text, "TOP FUNCTIONS").expect("functions");
    assert!(rows.iter().all(|r| cell(&head, r, "CALLS/S") == "0"), "{text}");
}

#[test]
fn errors_name_the_file() {
    let _share = cpu_share();
    let dir = fresh_dir("top-errors");
    let missing = dir.join("missing.stint");
    let junk = dir.join("junk.stint");
    std::fs::write(&junk, "this is not a profile, just text long enough for a header\n".repeat(200)).unwrap();
    let good = synthetic(&dir);
    let truncated = dir.join("truncated.stint");
    std::fs::write(&truncated, &std::fs::read(&good).unwrap()[..300]).unwrap();

    let check = |args: &[&str], names: &str, want: &str| {
        let o = stint(args);
        let err = o.stderr_str();
        assert!(o.status == 2 && o.stdout.is_empty(), "stint {args:?}: {o:?}");
        assert!(err.ends_with('\n') && err.lines().count() == 1, "stint {args:?}: not one line: {err:?}");
        assert!(err.starts_with(names) && err.contains(want), "stint {args:?}: {err:?} (want {names}…{want})");
    };
    for once in [true, false] {
        let with = |p: &Path| {
            let mut v = vec!["top".to_string(), path_str(p).to_string()];
            if once {
                v.extend(["--once".into(), "--interval".into(), "0".into()]);
            }
            v
        };
        for (p, want) in [(&missing, "No such file"), (&junk, "not a stint profile"), (&truncated, "truncated")] {
            let args = with(p);
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            check(&args, &format!("{}: ", p.display()), want);
        }
    }
    check(
        &["top", path_str(&good), "--once", "--interval", "0", "--thread", "17"],
        &format!("{}: ", good.display()),
        "no thread 17",
    );
    // The tests' stdout is a pipe.
    check(&["top", path_str(&good)], "stint top: stdout is not a terminal; use --once", "");
    // A bad interval is a usage error.
    for bad in ["--interval=-1", "--interval=soon"] {
        let o = stint(&["top", path_str(&good), "--once", bad]);
        assert!(o.status == 2 && o.stderr_str().contains("--interval"), "{o:?}");
    }
}

#[test]
fn help_has_examples() {
    let _share = cpu_share();
    for cmd in ["top", "ls"] {
        let o = stint(&[cmd, "--help"]);
        assert!(o.status == 0, "{o:?}");
        let help = o.stdout_str();
        assert!(help.contains("EXAMPLES:") && help.contains(&format!("stint {cmd} ")), "{help}");
    }
    let top = stint(&["top", "--help"]).stdout_str();
    for key in ["q, Esc", "1..6", "--once", "--interval", "--thread"] {
        assert!(top.contains(key), "stint top --help lacks {key}:\n{top}");
    }
}
