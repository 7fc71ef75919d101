//! `stint top`: a live view of a running program's profile, read from the file while the
//! program keeps writing it (D9: the file is the only channel; nothing stops the program).
//!
//! Every interval the file is read again with [`profile::load`] and compared with the
//! reading before: rates and shares are over that last interval (ThreadMon showed the last
//! three seconds of states; one interval is what `top` users expect). Threads are matched
//! by column index, never by tid: columns are never reused, tids are. A thread that
//! registered during the interval has all of its counts in it. CPU use comes from the
//! kernel, not the profile: the first field of `/proc/<pid>/task/<tid>/schedstat` is the
//! thread's time on a CPU in ns, read for every task of the process at each reading, so a
//! task missing from the previous reading was born during the interval. The first frame has
//! no interval: it shows totals and `-` for rates.
//!
//! The screen is computed once as plain cells ([`Screen`]) and then drawn either with
//! ratatui (the live view) or as aligned text (`--once`, the form scripts and tests read:
//! section titles `THREADS`, `TOP FUNCTIONS`, `LOCK WAITS`, one row per thread starting with
//! its tid, and in every table the one column that may hold spaces, a name, last).
//!
//! The terminal is restored however we leave: on return and on error by a guard's `Drop`,
//! on panic by the hook `ratatui::try_init` installs (it restores, then runs the previous
//! hook, so the panic message lands on the normal screen).

use std::cmp::Reverse;
use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::io::{IsTerminal, Write as _};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail};
use stint_layout::{metric_bit, state_name, METRIC_NAMES, N_METRICS, N_STATES, STATE_EXITED, STATE_RUN};

use crate::args::TopArgs;
use crate::fmt::{fmt_duration, fmt_ms, fmt_pct, fmt_rate, layout_rows};
use stint_profile::ctl::{self, Change};
use stint_profile::profile::{self, realtime_now_ns, Profile, ThreadProfile};
use stint_profile::report::{self, column_widths, uptime_ns};

pub fn run(args: TopArgs) -> anyhow::Result<()> {
    // The file first: its errors name it, whatever stdout is.
    let first = Reading::take(&args.profile)?;
    if args.once {
        return once(&args, first);
    }
    if !std::io::stdout().is_terminal() {
        bail!("stint top: stdout is not a terminal; use --once");
    }
    if args.interval.is_zero() {
        bail!("stint top: --interval 0 takes a single reading; use it with --once");
    }
    live(&args, first)
}

/// `--once`: two readings `--interval` apart (or one), printed as text.
fn once(args: &TopArgs, first: Reading) -> anyhow::Result<()> {
    let (prev, cur) = if args.interval.is_zero() {
        (None, first)
    } else {
        std::thread::sleep(args.interval);
        (Some(first), Reading::take(&args.profile)?)
    };
    if let Some(tid) = args.thread {
        if !cur.profile.threads.iter().any(|t| t.tid == tid) {
            bail!("{}: no thread {tid} in the profile", args.profile.display());
        }
    }
    let view = View { sort: Sort::Calls, thread: args.thread };
    let text = Screen::new(prev.as_ref(), &cur, &view).to_text();
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())?;
    out.flush()?;
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Readings
// ---------------------------------------------------------------------------------------

/// One reading of the profile file and of the kernel's CPU clocks of the process's tasks.
#[derive(Clone, Debug)]
pub struct Reading {
    pub profile: Profile,
    /// When it was taken (rates divide by the time between two readings).
    pub at: Instant,
    /// CLOCK_REALTIME at the reading, ns since the epoch (uptime, snapshot age).
    pub realtime_ns: u64,
    /// ns on a CPU of every task of the process (`/proc/<pid>/task/*/schedstat`); empty when
    /// the process has ended.
    pub cpu_ns: HashMap<u32, u64>,
}

impl Reading {
    /// Read the file (errors name it) and the CPU clocks.
    pub fn take(path: &Path) -> anyhow::Result<Reading> {
        let mut profile = profile::load(path).map_err(|e| anyhow!("{}: {e}", path.display()))?;
        // Names from debug info (issue 11), looked up once per program and kept.
        thread_local! {
            static NAMES: stint_profile::symbols::Resolver = stint_profile::symbols::Resolver::new(
                stint_profile::symbols::SymbolOptions::from_env(None, true),
            );
        }
        NAMES.with(|names| profile.resolve_names(names));
        let cpu_ns = if profile.alive { task_cpu_ns(profile.pid) } else { HashMap::new() };
        Ok(Reading { profile, at: Instant::now(), realtime_ns: realtime_now_ns(), cpu_ns })
    }
}

fn task_cpu_ns(pid: u32) -> HashMap<u32, u64> {
    let mut m = HashMap::new();
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/task")) else { return m };
    for e in dir.flatten() {
        let Some(tid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else { continue };
        let stat = std::fs::read_to_string(e.path().join("schedstat")).unwrap_or_default();
        if let Some(ns) = parse_schedstat(&stat) {
            m.insert(tid, ns);
        }
    }
    m
}

/// ns on a CPU from `/proc/.../schedstat` (`on-cpu-ns wait-ns timeslices`).
pub fn parse_schedstat(s: &str) -> Option<u64> {
    s.split_whitespace().next()?.parse().ok()
}

/// Two readings of the same run: the same process, not a new file at the same path.
fn same_run(a: &Profile, b: &Profile) -> bool {
    a.pid == b.pid && a.start_realtime_ns == b.start_realtime_ns
}

/// The previous reading and the seconds since it, when rates can be computed.
fn interval<'a>(prev: Option<&'a Reading>, cur: &Reading) -> Option<(&'a Reading, f64)> {
    let prev = prev?;
    let secs = cur.at.checked_duration_since(prev.at)?.as_secs_f64();
    (secs > 0.0 && same_run(&prev.profile, &cur.profile)).then_some((prev, secs))
}

/// The metrics on at some point (`metric_bit`s of any gate).
pub fn metrics_on(p: &Profile) -> u8 {
    p.gates.iter().fold(0u8, |a, g| a | g) & all_metrics()
}

fn all_metrics() -> u8 {
    ((1u32 << N_METRICS) - 1) as u8
}

// ---------------------------------------------------------------------------------------
// What the screen shows, as numbers
// ---------------------------------------------------------------------------------------

/// How functions are sorted (key `s`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Sort {
    /// Calls in the interval, then calls in all.
    #[default]
    Calls,
    /// Inclusive CPU time in the interval, then in all.
    Cpu,
    /// Inclusive wall time in the interval, then in all.
    Wall,
}

impl Sort {
    pub fn next(self) -> Sort {
        match self {
            Sort::Calls => Sort::Cpu,
            Sort::Cpu => Sort::Wall,
            Sort::Wall => Sort::Calls,
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            Sort::Calls => "calls",
            Sort::Cpu => "cpu",
            Sort::Wall => "wall",
        }
    }
}

/// What the user chose to see.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct View {
    pub sort: Sort,
    /// Functions and lock waits of this thread only (tid); all threads if `None`.
    pub thread: Option<u32>,
}

/// One row of the threads table.
#[derive(Clone, Debug, PartialEq)]
pub struct ThreadRow {
    pub index: u32,
    pub tid: u32,
    pub name: Option<String>,
    /// `RUN`, `BLOCKED_MUTEX`, …; `EXITED`, or `gone` for a thread that ended unseen.
    pub state: &'static str,
    pub alive: bool,
    /// Time on a CPU over the interval, % of the interval.
    pub cpu_pct: Option<f64>,
    /// Share of the thread's observed time (interval, else total) in RUN.
    pub run_pct: Option<f64>,
    /// RUN split by the kernel's schedstat: off a CPU (I/O, sleep, waits inside libraries)
    /// and waiting for a CPU, % of the thread's observed time (interval, else total);
    /// `None` without schedstat figures (at either reading).
    pub offcpu_pct: Option<f64>,
    pub runq_pct: Option<f64>,
    /// The BLOCKED_* state with the biggest share, and the share.
    pub blocked: Option<(u32, f64)>,
    pub calls_per_s: Option<f64>,
    pub calls: u64,
    pub mask: u32,
}

/// The threads to show: those running now or at the previous reading, and all of them once
/// the process has ended. In column (registration) order.
pub fn thread_rows(prev: Option<&Reading>, cur: &Reading) -> Vec<ThreadRow> {
    let iv = interval(prev, cur);
    let before: HashMap<u32, &ThreadProfile> =
        iv.map(|(r, _)| r.profile.threads.iter().map(|t| (t.index, t)).collect()).unwrap_or_default();
    let p = &cur.profile;
    let mut rows = Vec::new();
    for t in &p.threads {
        let old = before.get(&t.index).copied();
        if !(t.alive || !p.alive || old.is_some_and(|o| o.alive)) {
            continue;
        }
        let ticks = |s: u32| t.state_ticks[s as usize].saturating_sub(old.map_or(0, |o| o.state_ticks[s as usize]));
        let observed = (0..N_STATES).filter(|&s| s != STATE_EXITED).fold(0u64, |a, s| a.saturating_add(ticks(s)));
        let pct = |x: u64| (observed != 0).then(|| x as f64 * 100.0 / observed as f64);
        let blocked = (0..N_STATES)
            .filter(|&s| s != STATE_RUN && s != STATE_EXITED && ticks(s) != 0)
            .max_by_key(|&s| (ticks(s), Reverse(s)))
            .and_then(|s| Some((s, pct(ticks(s))?)));
        let cpu_pct = iv.and_then(|(prev, secs)| {
            // A task the previous reading did not list was born since: its whole CPU time
            // is in the interval. Without a previous listing there is no baseline.
            if !t.alive || prev.cpu_ns.is_empty() {
                return None;
            }
            let now = *cur.cpu_ns.get(&t.tid)?;
            let then = prev.cpu_ns.get(&t.tid).copied().unwrap_or(0);
            Some(now.saturating_sub(then) as f64 / 1e9 / secs * 100.0)
        });
        // The split over the interval: what it is now minus what it was.
        let split = match (t.run_split(p.tsc_hz), old.map(|o| o.run_split(p.tsc_hz))) {
            (Some(now), None) => Some(now),
            (Some(now), Some(Some(then))) => {
                Some((now.0.saturating_sub(then.0), now.1.saturating_sub(then.1), now.2.saturating_sub(then.2)))
            }
            _ => None,
        };
        let calls = t.total_calls();
        let state = if t.alive || t.thread_state == STATE_EXITED {
            state_name(t.thread_state).unwrap_or("unknown")
        } else {
            "gone"
        };
        rows.push(ThreadRow {
            index: t.index,
            tid: t.tid,
            name: t.name.clone(),
            state,
            alive: t.alive,
            cpu_pct,
            run_pct: pct(ticks(STATE_RUN)),
            offcpu_pct: split.and_then(|s| pct(s.1)),
            runq_pct: split.and_then(|s| pct(s.2)),
            blocked,
            calls_per_s: iv.map(|(_, secs)| calls.saturating_sub(old.map_or(0, |o| o.total_calls())) as f64 / secs),
            calls,
            mask: t.thread_mask,
        });
    }
    rows
}

/// One row of the functions table: a function over the chosen threads.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FunctionRow {
    pub name: String,
    pub address: String,
    pub calls: u64,
    /// `None` without an interval.
    pub calls_delta: Option<u64>,
    /// Inclusive ns, `None` if the function is not timed (or the file has no calibration).
    pub cpu_ns: Option<u64>,
    pub wall_ns: Option<u64>,
    pub cpu_delta_ns: Option<u64>,
    pub wall_delta_ns: Option<u64>,
}

#[derive(Clone, Debug, Default)]
struct FunctionSums {
    calls: u64,
    cpu_ns: Option<u64>,
    wall_ns: Option<u64>,
}

fn add_opt(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    match (a, b) {
        (None, None) => None,
        (a, b) => Some(a.unwrap_or(0).saturating_add(b.unwrap_or(0))),
    }
}

fn selected(t: &ThreadProfile, thread: Option<u32>) -> bool {
    thread.is_none_or(|tid| t.tid == tid)
}

/// Calls and times per (function, address) over the threads `thread` selects, as
/// [`report::functions`] gives them per thread.
fn function_sums(p: &Profile, thread: Option<u32>) -> BTreeMap<(String, String), FunctionSums> {
    let mut m: BTreeMap<(String, String), FunctionSums> = BTreeMap::new();
    for t in p.threads.iter().filter(|t| selected(t, thread)) {
        for f in report::functions(p, t) {
            let s = m.entry((f.name, f.address)).or_default();
            s.calls = s.calls.saturating_add(f.calls);
            s.cpu_ns = add_opt(s.cpu_ns, f.cpu_ns);
            s.wall_ns = add_opt(s.wall_ns, f.wall_ns);
        }
    }
    m
}

/// CPU and wall ticks per (function, address) over the threads `thread` selects, between
/// the readings `prev` and `cur` ([`stint_profile::profile::interval_ticks`]: a sampled
/// function's by the interval's calls ÷ the interval's timed calls). A thread is the same
/// in both readings when its column and tid are.
fn interval_sums(prev: &Profile, cur: &Profile, thread: Option<u32>) -> BTreeMap<(String, String), (u64, u64)> {
    let mut m: BTreeMap<(String, String), (u64, u64)> = BTreeMap::new();
    for t in cur.threads.iter().filter(|t| selected(t, thread)) {
        let then = prev.threads.iter().find(|p| p.index == t.index && p.tid == t.tid);
        let points: std::collections::BTreeSet<u32> = t.times.iter().map(|x| x.0).collect();
        for point in points {
            let key = match cur.point(point) {
                Some(pm) => (pm.function.clone(), pm.address.clone()),
                None => (format!("point {point}"), String::new()),
            };
            let (cpu, wall) = stint_profile::profile::interval_ticks(then, t, point);
            let e = m.entry(key).or_default();
            e.0 = e.0.saturating_add(cpu);
            e.1 = e.1.saturating_add(wall);
        }
    }
    m
}

/// Every function the chosen threads called, sorted as `view.sort` says (most first; ties
/// by name and address).
pub fn function_rows(prev: Option<&Reading>, cur: &Reading, view: &View) -> Vec<FunctionRow> {
    let before = interval(prev, cur).map(|(r, _)| function_sums(&r.profile, view.thread));
    let spans = interval(prev, cur).map(|(r, _)| interval_sums(&r.profile, &cur.profile, view.thread));
    let p = &cur.profile;
    let mut rows: Vec<FunctionRow> = function_sums(&cur.profile, view.thread)
        .into_iter()
        .map(|((name, address), s)| {
            let old = before.as_ref().map(|b| b.get(&(name.clone(), address.clone())).cloned().unwrap_or_default());
            let span = spans.as_ref().map(|m| m.get(&(name.clone(), address.clone())).copied().unwrap_or_default());
            FunctionRow {
                calls_delta: old.as_ref().map(|o| s.calls.saturating_sub(o.calls)),
                cpu_delta_ns: s.cpu_ns.and(span).and_then(|(cpu, _)| p.ticks_to_ns(cpu)),
                wall_delta_ns: s.wall_ns.and(span).and_then(|(_, wall)| p.ticks_to_ns(wall)),
                name,
                address,
                calls: s.calls,
                cpu_ns: s.cpu_ns,
                wall_ns: s.wall_ns,
            }
        })
        .collect();
    let z = |x: Option<u64>| x.unwrap_or(0);
    rows.sort_by_key(|r| {
        Reverse(match view.sort {
            Sort::Calls => (z(r.calls_delta), r.calls, 0, 0),
            Sort::Cpu => (z(r.cpu_delta_ns), z(r.cpu_ns), z(r.calls_delta), r.calls),
            Sort::Wall => (z(r.wall_delta_ns), z(r.wall_ns), z(r.calls_delta), r.calls),
        })
    });
    rows
}

/// One row of the lock-waits table: a sync object over the chosen threads.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LockRow {
    /// Index in the file's object table.
    pub object: u32,
    pub address: Option<u64>,
    pub kind: &'static str,
    pub first_used_in: Option<String>,
    /// The object's data symbol or the thread it is ([`report::object_name`]).
    pub name: Option<String>,
    /// Wait time in ns (`None` without a TSC calibration).
    pub wait_ns: Option<u64>,
    pub wait_delta_ns: Option<u64>,
    pub calls: u64,
    pub calls_delta: Option<u64>,
    pub contended: u64,
    /// For sorting: ticks waited in the interval (0 without one) and in all.
    wait_delta_ticks: u64,
    wait_ticks: u64,
}

#[derive(Clone, Copy, Debug, Default)]
struct WaitSums {
    wait_ticks: u64,
    count: u64,
    contended: u64,
    kind: u32,
}

fn wait_sums(p: &Profile, thread: Option<u32>) -> BTreeMap<u32, WaitSums> {
    let mut m: BTreeMap<u32, WaitSums> = BTreeMap::new();
    for t in p.threads.iter().filter(|t| selected(t, thread)) {
        for w in &t.waits {
            let s = m.entry(w.object).or_default();
            s.wait_ticks = s.wait_ticks.saturating_add(w.wait_ticks);
            s.count = s.count.saturating_add(w.count);
            s.contended = s.contended.saturating_add(w.contended);
            s.kind = w.kind;
        }
    }
    m
}

/// The sync objects the chosen threads waited on or acquired, most wait time in the
/// interval first (then in all, then calls; ties by object index).
pub fn lock_rows(prev: Option<&Reading>, cur: &Reading, view: &View) -> Vec<LockRow> {
    let p = &cur.profile;
    let before = interval(prev, cur).map(|(r, _)| wait_sums(&r.profile, view.thread));
    let mut rows: Vec<LockRow> = wait_sums(p, view.thread)
        .into_iter()
        .filter(|(_, s)| s.wait_ticks != 0 || s.count != 0)
        .map(|(index, s)| {
            let old = before.as_ref().map(|b| b.get(&index).copied().unwrap_or_default());
            let object = p.object(index);
            let wait_delta_ticks = old.map(|o| s.wait_ticks.saturating_sub(o.wait_ticks));
            LockRow {
                object: index,
                address: object.map(|o| o.address),
                kind: object
                    .map_or_else(|| stint_layout::object_kind_name(s.kind).unwrap_or("unknown"), |o| o.kind_name()),
                first_used_in: object.and_then(|o| report::first_used_in(p, o)),
                name: object.and_then(|o| report::object_name(p, o)),
                wait_ns: p.ticks_to_ns(s.wait_ticks),
                wait_delta_ns: wait_delta_ticks.and_then(|t| p.ticks_to_ns(t)),
                calls: s.count,
                calls_delta: old.map(|o| s.count.saturating_sub(o.count)),
                contended: s.contended,
                wait_delta_ticks: wait_delta_ticks.unwrap_or(0),
                wait_ticks: s.wait_ticks,
            }
        })
        .collect();
    rows.sort_by_key(|r| Reverse((r.wait_delta_ticks, r.wait_ticks, r.calls_delta.unwrap_or(0), r.calls)));
    rows
}

/// Names of the metrics in `bits`, space-separated (`none` for none).
fn metric_names(bits: u8) -> String {
    let v: Vec<&str> =
        (0..N_METRICS).filter(|&m| bits & metric_bit(m) != 0).map(|m| METRIC_NAMES[m as usize]).collect();
    if v.is_empty() {
        "none".into()
    } else {
        v.join(" ")
    }
}

// ---------------------------------------------------------------------------------------
// The screen as cells
// ---------------------------------------------------------------------------------------

/// Functions shown.
const TOP_FUNCTIONS: usize = 10;
/// Sync objects shown.
const TOP_LOCKS: usize = 5;

/// A titled table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Section {
    pub title: &'static str,
    pub head: Vec<&'static str>,
    /// Right-align column i.
    pub right: Vec<bool>,
    pub rows: Vec<Vec<String>>,
    /// What to say when there are no rows.
    pub empty: &'static str,
}

impl Section {
    fn to_text(&self) -> String {
        let mut out = format!("{}\n", self.title);
        if self.rows.is_empty() {
            let _ = writeln!(out, "{}", self.empty);
            return out;
        }
        let mut rows = vec![self.head.iter().map(|h| h.to_string()).collect::<Vec<_>>()];
        rows.extend(self.rows.iter().cloned());
        out.push_str(&layout_rows(&rows, &self.right));
        out
    }
}

/// Everything one frame shows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Screen {
    pub header: Vec<String>,
    pub threads: Section,
    pub functions: Section,
    pub locks: Section,
    /// What the numbers mean.
    pub legend: String,
    pub warnings: Vec<String>,
    /// tids of the threads table, in order (for the `t` key).
    pub tids: Vec<u32>,
}

impl Screen {
    pub fn new(prev: Option<&Reading>, cur: &Reading, view: &View) -> Screen {
        let p = &cur.profile;
        let iv = interval(prev, cur);
        let secs = iv.map(|(_, s)| s);
        let per_s = |d: Option<u64>| secs.and_then(|s| d.map(|d| d as f64 / s));
        let share = |ns: Option<u64>| secs.and_then(|s| ns.map(|n| n as f64 / 1e9 / s * 100.0));

        // Header.
        let mut line1 = format!("program {}  pid {}", p.program, p.pid);
        if p.fork_child() {
            let _ = write!(line1, " (forked from {})", p.ppid);
        }
        let live = p.threads.iter().filter(|t| t.alive).count();
        match (p.alive, uptime_ns(p, cur.realtime_ns)) {
            (true, up) => {
                let _ = write!(line1, "  running  uptime {}", up.map_or("-".into(), |n| fmt_duration(n as f64 / 1e9)));
            }
            (false, last) => {
                let _ = write!(
                    line1,
                    "  ended  last event at {}",
                    last.map_or("-".into(), |n| fmt_duration(n as f64 / 1e9))
                );
            }
        }
        let _ = write!(line1, "  threads {live}/{} live", p.threads.len());
        let on = metrics_on(p);
        let mut line2 = format!("metrics on: {}", metric_names(on));
        if on != all_metrics() {
            let _ = write!(line2, "  (off: {})", metric_names(!on & all_metrics()));
        }
        let c = &p.control;
        if c.last_snapshot != 0 {
            let age =
                cur.realtime_ns.checked_sub(c.last_snapshot_realtime_ns).filter(|_| c.last_snapshot_realtime_ns != 0);
            let _ = write!(
                line2,
                "  snapshot #{} {}",
                c.last_snapshot,
                age.map_or(String::new(), |a| format!("{} ago", fmt_duration(a as f64 / 1e9)))
            );
        } else {
            line2.push_str("  snapshot: none");
        }
        let _ = write!(line2, "  control file: {}", if c.control_file.is_empty() { "none" } else { &c.control_file });
        if !c.control_message.is_empty() {
            let _ = write!(line2, " ({})", c.control_message);
        }
        let scope = match view.thread {
            None => "all threads".to_string(),
            Some(tid) => match p.threads.iter().find(|t| t.tid == tid).and_then(|t| t.name.as_deref()) {
                Some(name) => format!("thread {tid} {name}"),
                None => format!("thread {tid}"),
            },
        };
        let line3 = format!(
            "interval {}  functions and lock waits of {scope}, by {}",
            secs.map_or("- (one reading: totals, no rates)".into(), |s| format!("{s:.2} s")),
            view.sort.name()
        );

        // Threads.
        let trows = thread_rows(prev, cur);
        let mask_column = trows.iter().any(|r| r.mask as u8 & all_metrics() != all_metrics());
        let mut head = vec!["TID", "STATE", "CPU%", "RUN%"];
        let mut right = vec![false, false, true, true];
        // RUN split (issue 12), when the kernel's figures are there for some thread.
        let split = trows.iter().any(|r| r.offcpu_pct.is_some());
        let split_shown = split;
        if split {
            head.extend(["OFFCPU%", "RUNQ%"]);
            right.extend([true, true]);
        }
        head.extend(["BLOCKED%", "BLOCKED", "CALLS/S", "CALLS"]);
        right.extend([true, false, true, true]);
        if mask_column {
            head.push("MASK");
            right.push(false);
        }
        head.push("NAME");
        right.push(false);
        let rows = trows
            .iter()
            .map(|r| {
                let (blocked_pct, blocked) = match r.blocked {
                    Some((s, pct)) => {
                        let name = state_name(s).unwrap_or("unknown");
                        (fmt_pct(Some(pct)), name.strip_prefix("BLOCKED_").unwrap_or(name).to_string())
                    }
                    None => ("-".into(), "-".into()),
                };
                let mut row = vec![r.tid.to_string(), r.state.to_string(), fmt_pct(r.cpu_pct), fmt_pct(r.run_pct)];
                if split {
                    row.extend([fmt_pct(r.offcpu_pct), fmt_pct(r.runq_pct)]);
                }
                row.extend([blocked_pct, blocked, fmt_rate(r.calls_per_s), r.calls.to_string()]);
                if mask_column {
                    let m = r.mask as u8 & all_metrics();
                    row.push(if m == all_metrics() { "all".into() } else { metric_names(m).replace(' ', ",") });
                }
                row.push(r.name.clone().unwrap_or_else(|| "-".into()));
                row
            })
            .collect();
        let threads = Section { title: "THREADS", head, right, rows, empty: "(no threads)" };

        // Functions.
        let frows = function_rows(prev, cur, view);
        let timed = frows.iter().any(|f| f.cpu_ns.is_some() || f.wall_ns.is_some());
        let (head, right) = if timed {
            (
                vec!["CALLS/S", "CALLS", "CPU%", "WALL%", "CPU-MS", "WALL-MS", "ADDRESS", "FUNCTION"],
                vec![true, true, true, true, true, true, false, false],
            )
        } else {
            (vec!["CALLS/S", "CALLS", "ADDRESS", "FUNCTION"], vec![true, true, false, false])
        };
        let rows = frows
            .iter()
            .take(TOP_FUNCTIONS)
            .map(|f| {
                let mut row = vec![fmt_rate(per_s(f.calls_delta)), f.calls.to_string()];
                if timed {
                    row.extend([
                        fmt_pct(share(f.cpu_delta_ns)),
                        fmt_pct(share(f.wall_delta_ns)),
                        fmt_ms(f.cpu_ns),
                        fmt_ms(f.wall_ns),
                    ]);
                }
                row.extend([f.address.clone(), f.name.clone()]);
                row
            })
            .collect();
        let functions = Section { title: "TOP FUNCTIONS", head, right, rows, empty: "(no calls)" };

        // Locks.
        let rows = lock_rows(prev, cur, view)
            .iter()
            .take(TOP_LOCKS)
            .map(|l| {
                vec![
                    fmt_pct(share(l.wait_delta_ns)),
                    fmt_ms(l.wait_ns),
                    fmt_rate(per_s(l.calls_delta)),
                    l.calls.to_string(),
                    l.contended.to_string(),
                    l.kind.to_string(),
                    l.address.map_or("-".into(), |a| format!("{a:#x}")),
                    l.name.clone().unwrap_or_else(|| "-".into()),
                    l.first_used_in.clone().unwrap_or_else(|| "-".into()),
                ]
            })
            .collect();
        let locks = Section {
            title: "LOCK WAITS",
            head: vec!["WAIT%", "WAIT-MS", "CALLS/S", "CALLS", "CONTENDED", "KIND", "OBJECT", "NAME", "FIRST-USED-IN"],
            right: vec![true, true, true, true, true, false, false, false, false],
            rows,
            empty: "(no waits: lock_wait is off, or no wrapped thread-library call ran)",
        };

        let legend = match secs {
            Some(s) => format!(
                "rates and %: over the last {s:.2} s. CPU%: on a CPU (kernel); RUN%, BLOCKED%: of the thread's \
                 observed time; function CPU%, WALL%, lock WAIT%: inclusive time in the interval over its length, \
                 summed over threads; -MS: totals since the start"
            ),
            None => "one reading: totals since the start; rates need two readings".into(),
        };
        let legend = if split_shown {
            format!("{legend}; OFFCPU%: in RUN but off a CPU (I/O, sleep), RUNQ%: waiting for a CPU (schedstat)")
        } else {
            legend
        };
        Screen {
            header: vec![line1, line2, line3],
            threads,
            functions,
            locks,
            legend,
            warnings: p.warnings.clone(),
            tids: trows.iter().map(|r| r.tid).collect(),
        }
    }

    /// The frame as plain text (`--once`).
    pub fn to_text(&self) -> String {
        let mut out = String::new();
        for l in &self.header {
            let _ = writeln!(out, "{l}");
        }
        for s in [&self.threads, &self.functions, &self.locks] {
            out.push('\n');
            out.push_str(&s.to_text());
        }
        let _ = writeln!(out, "\n{}", self.legend);
        for w in &self.warnings {
            let _ = writeln!(out, "warning: {w}");
        }
        out
    }
}

// ---------------------------------------------------------------------------------------
// The live view
// ---------------------------------------------------------------------------------------

/// Restores the terminal when dropped (return and error paths; panics have the hook).
struct RestoreTerminal;

impl Drop for RestoreTerminal {
    fn drop(&mut self) {
        ratatui::restore();
    }
}

struct App {
    path: PathBuf,
    interval: Duration,
    view: View,
    prev: Option<Reading>,
    cur: Reading,
    screen: Screen,
    paused: bool,
    /// Result of the last key that did something.
    status: String,
    /// Why the last refresh failed (the screen shows the reading before), until one works.
    stale: Option<String>,
}

fn live(args: &TopArgs, first: Reading) -> anyhow::Result<()> {
    let view = View { sort: Sort::Calls, thread: args.thread };
    let screen = Screen::new(None, &first, &view);
    let mut app = App {
        path: args.profile.clone(),
        interval: args.interval,
        view,
        prev: None,
        cur: first,
        screen,
        paused: false,
        status: String::new(),
        stale: None,
    };
    // The guard first: if setting up fails half-way, what was set up is undone.
    let _restore = RestoreTerminal;
    let mut terminal = ratatui::try_init().map_err(|e| anyhow!("stint top: cannot set up the terminal: {e}"))?;
    app.run(&mut terminal)
}

impl App {
    fn run(&mut self, terminal: &mut ratatui::DefaultTerminal) -> anyhow::Result<()> {
        use crossterm::event::{self, Event, KeyEventKind};
        let mut next = Instant::now() + self.interval;
        loop {
            terminal.draw(|f| self.draw(f))?;
            let wait = next.saturating_duration_since(Instant::now());
            if event::poll(wait)? {
                if let Event::Key(k) = event::read()? {
                    if k.kind == KeyEventKind::Press && self.key(k) {
                        return Ok(());
                    }
                }
            }
            if Instant::now() >= next {
                if !self.paused {
                    self.refresh();
                }
                next = Instant::now() + self.interval;
            }
        }
    }

    fn refresh(&mut self) {
        match Reading::take(&self.path) {
            Ok(r) => {
                self.prev = Some(std::mem::replace(&mut self.cur, r));
                self.stale = None;
                self.rebuild();
            }
            // Keep showing the last good reading (the file may be gone, or not ours now).
            Err(e) => self.stale = Some(crate::one_line(&e)),
        }
    }

    fn rebuild(&mut self) {
        self.screen = Screen::new(self.prev.as_ref(), &self.cur, &self.view);
    }

    /// Handle a key; true to quit.
    fn key(&mut self, k: crossterm::event::KeyEvent) -> bool {
        use crossterm::event::{KeyCode, KeyModifiers};
        match k.code {
            KeyCode::Char('q') | KeyCode::Esc => return true,
            KeyCode::Char('c') if k.modifiers.contains(KeyModifiers::CONTROL) => return true,
            KeyCode::Char('s') => {
                self.view.sort = self.view.sort.next();
                self.rebuild();
            }
            KeyCode::Char('t') => {
                self.view.thread = next_thread(&self.screen.tids, self.view.thread);
                self.rebuild();
            }
            KeyCode::Char('p') => {
                self.paused = !self.paused;
                self.status = if self.paused { "paused".into() } else { "resumed".into() };
            }
            KeyCode::Char(c @ '1'..='9') => {
                let metric = c as u32 - '1' as u32;
                if metric < N_METRICS {
                    self.toggle(metric);
                }
            }
            _ => {}
        }
        false
    }

    /// Switch `metric` for every point and thread: on if it is off everywhere, else off.
    fn toggle(&mut self, metric: u32) {
        let on = metrics_on(&self.cur.profile) & metric_bit(metric) == 0;
        let name = METRIC_NAMES[metric as usize];
        let change = Change { metric, on, function: None, thread: None };
        self.status = match ctl::apply(&self.path, &change) {
            Ok(summary) => {
                self.reload_control();
                summary
            }
            Err(e) => format!("{name} {}: {e}", if on { "on" } else { "off" }),
        };
    }

    /// Take the gates, control page and thread masks from the file again (after a change),
    /// without starting a new interval.
    fn reload_control(&mut self) {
        let Ok(p) = profile::load(&self.path) else { return };
        if !same_run(&p, &self.cur.profile) {
            return;
        }
        let masks: HashMap<u32, u32> = p.threads.iter().map(|t| (t.index, t.thread_mask)).collect();
        for t in &mut self.cur.profile.threads {
            if let Some(&m) = masks.get(&t.index) {
                t.thread_mask = m;
            }
        }
        self.cur.profile.gates = p.gates;
        self.cur.profile.control = p.control;
        self.rebuild();
    }

    fn draw(&self, f: &mut ratatui::Frame) {
        use ratatui::layout::{Constraint, Layout};
        use ratatui::style::{Modifier, Style};
        use ratatui::text::Line;
        use ratatui::widgets::Paragraph;

        let s = &self.screen;
        let [head, threads, functions, locks, status] = Layout::vertical([
            Constraint::Length(s.header.len() as u16),
            Constraint::Min(5),
            Constraint::Length(TOP_FUNCTIONS as u16 + 3),
            Constraint::Length(TOP_LOCKS as u16 + 3),
            Constraint::Length(1),
        ])
        .areas(f.area());
        let mut header: Vec<Line> = s.header.iter().map(|l| Line::from(l.as_str())).collect();
        if self.paused {
            if let Some(l) = header.first_mut() {
                l.push_span(ratatui::text::Span::styled("  PAUSED", Style::new().add_modifier(Modifier::REVERSED)));
            }
        }
        f.render_widget(Paragraph::new(header), head);
        let highlight = self.view.thread.map(|t| t.to_string());
        draw_section(f, &s.threads, s.threads.title.to_string(), threads, highlight.as_deref());
        let scope = match self.view.thread {
            Some(t) => format!("thread {t}"),
            None => "all threads".into(),
        };
        let title = format!("{} ({scope}, by {})", s.functions.title, self.view.sort.name());
        draw_section(f, &s.functions, title, functions, None);
        draw_section(f, &s.locks, format!("{} ({scope})", s.locks.title), locks, None);
        let keys = "q quit  s sort  t thread  1-6 metric on/off  p pause";
        let text = match (&self.stale, self.status.is_empty()) {
            (Some(e), _) => format!("{keys}  | not refreshed: {e}"),
            (None, true) => keys.to_string(),
            (None, false) => format!("{keys}  | {}", self.status),
        };
        f.render_widget(Paragraph::new(text).style(Style::new().add_modifier(Modifier::REVERSED)), status);
    }
}

/// The thread after `cur` in `tids`, `None` (all threads) after the last.
fn next_thread(tids: &[u32], cur: Option<u32>) -> Option<u32> {
    match cur {
        None => tids.first().copied(),
        Some(t) => match tids.iter().position(|&x| x == t) {
            Some(i) => tids.get(i + 1).copied(),
            None => tids.first().copied(),
        },
    }
}

fn draw_section(f: &mut ratatui::Frame, s: &Section, title: String, area: ratatui::layout::Rect, mark: Option<&str>) {
    use ratatui::layout::Constraint;
    use ratatui::style::{Modifier, Style};
    use ratatui::text::Line;
    use ratatui::widgets::{Block, Cell, Paragraph, Row, Table};

    let block = Block::bordered().title(title);
    if s.rows.is_empty() {
        f.render_widget(Paragraph::new(s.empty).block(block), area);
        return;
    }
    let cell = |c: &str, right: bool| {
        let l = Line::from(c.to_string());
        Cell::from(if right { l.right_aligned() } else { l })
    };
    let mut all = vec![s.head.iter().map(|h| h.to_string()).collect::<Vec<_>>()];
    all.extend(s.rows.iter().cloned());
    let widths = column_widths(&all);
    let n = widths.len();
    let constraints: Vec<Constraint> = widths
        .iter()
        .enumerate()
        .map(|(i, &w)| if i + 1 == n { Constraint::Fill(1) } else { Constraint::Length(w as u16) })
        .collect();
    let right = |i: usize| s.right.get(i).copied().unwrap_or(false);
    let header = Row::new(s.head.iter().enumerate().map(|(i, h)| cell(h, right(i))))
        .style(Style::new().add_modifier(Modifier::BOLD));
    let rows = s.rows.iter().map(|r| {
        let row = Row::new(r.iter().enumerate().map(|(i, c)| cell(c, right(i))));
        if mark.is_some_and(|m| r.first().is_some_and(|c| c == m)) {
            row.style(Style::new().add_modifier(Modifier::REVERSED))
        } else {
            row
        }
    });
    f.render_widget(Table::new(rows, constraints).header(header).block(block).column_spacing(2), area);
}

#[cfg(test)]
mod tests {
    use super::*;
    use stint_layout::{SyncObject, WaitEntry, OBJ_MUTEX, STATE_BLOCKED_CONDVAR, STATE_BLOCKED_MUTEX};
    use stint_profile::profile::{parse_with, Observer};
    use stint_profile::synthetic::{
        patch_column, patch_header, put_object, put_wait, synthetic_meta, write_synthetic, SYNTHETIC_START_TSC,
    };

    #[test]
    fn metric_names_of_bits() {
        assert_eq!(metric_names(0), "none");
        assert_eq!(metric_names(0b101001), "calls lock_wait state_trace");
    }

    #[test]
    fn schedstat() {
        assert_eq!(parse_schedstat("1672402949 102458 19\n"), Some(1672402949));
        assert_eq!(parse_schedstat(""), None);
        assert_eq!(parse_schedstat("x 1 2"), None);
        let me = task_cpu_ns(std::process::id());
        assert!(me.contains_key(&std::process::id()), "{me:?}");
    }

    #[test]
    fn next_thread_cycles_and_returns_to_all() {
        let tids = [10, 11, 12];
        assert_eq!(next_thread(&tids, None), Some(10));
        assert_eq!(next_thread(&tids, Some(10)), Some(11));
        assert_eq!(next_thread(&tids, Some(12)), None);
        assert_eq!(next_thread(&tids, Some(99)), Some(10));
        assert_eq!(next_thread(&[], None), None);
    }

    const PID: u32 = 4_000_000_001;
    const TPS: u64 = 1_000_000_000; // tsc_hz: one tick per ns

    fn meta() -> String {
        synthetic_meta("srv", &[("main", "0x1000"), ("work", "0x1100"), ("idle", "0x1200")])
    }

    /// A synthetic profile: main (calls main 1), worker 1 with `work` calls, worker 2 with
    /// `idle` calls; a mutex; a TSC calibration of 1 GHz. Every thread alive.
    fn file(work: u64, idle: u64, extra: Option<u64>) -> Vec<u8> {
        let mut threads = vec![(PID, vec![(0, 1)]), (PID + 1, vec![(1, work)]), (PID + 2, vec![(2, idle)])];
        if let Some(n) = extra {
            threads.push((PID + 3, vec![(1, n)]));
        }
        let mut b = write_synthetic(&meta(), &threads);
        patch_header(&mut b, |h| h.tsc_hz = TPS);
        put_object(
            &mut b,
            0,
            &SyncObject {
                address: 0x5000,
                first_pc: 0x1110,
                kind: OBJ_MUTEX,
                first_tid: PID + 1,
                ..Default::default()
            },
        );
        patch_header(&mut b, |h| h.n_objects = 1);
        patch_column(&mut b, 1, |c| {
            c.name[..6].copy_from_slice(b"spin-a");
        });
        b
    }

    fn reading(b: &[u8], at: Instant, cpu: &[(u32, u64)], alive: &[u32]) -> Reading {
        let obs = Observer {
            thread_alive: |_, _| true,
            process_alive: |_| true,
            now_tsc: || SYNTHETIC_START_TSC, // no open state interval
            thread_cpu_ns: |_, _| None,
            thread_sched_ns: |_, _| None,
        };
        let mut profile = parse_with(b, &obs).unwrap();
        for t in &mut profile.threads {
            t.alive = alive.contains(&t.tid);
        }
        Reading { profile, at, realtime_ns: 1_700_000_005_000_000_000, cpu_ns: cpu.iter().copied().collect() }
    }

    #[test]
    fn deltas_with_a_thread_appearing_and_one_going_away() {
        let t0 = Instant::now();
        let t1 = t0 + Duration::from_millis(500);
        let mut b0 = file(1000, 50, None);
        patch_column(&mut b0, 1, |c| {
            c.state_ticks[STATE_RUN as usize] = 100;
            c.state_ticks[STATE_BLOCKED_MUTEX as usize] = 100;
        });
        let r0 = reading(&b0, t0, &[(PID, 10), (PID + 1, 1_000_000), (PID + 2, 0)], &[PID, PID + 1, PID + 2]);
        // Half a second later: worker 1 ran 1500 more calls, used 250 ms of CPU and spent
        // 300 ticks running and 100 blocked; worker 2 is gone; thread 3 appeared with 400
        // calls and 50 ms of CPU.
        let mut b1 = file(2500, 50, Some(400));
        patch_column(&mut b1, 1, |c| {
            c.state_ticks[STATE_RUN as usize] = 400;
            c.state_ticks[STATE_BLOCKED_MUTEX as usize] = 150;
            c.state_ticks[STATE_BLOCKED_CONDVAR as usize] = 50;
        });
        let r1 =
            reading(&b1, t1, &[(PID, 10), (PID + 1, 251_000_000), (PID + 3, 50_000_000)], &[PID, PID + 1, PID + 3]);

        let rows = thread_rows(Some(&r0), &r1);
        assert_eq!(rows.iter().map(|r| r.tid).collect::<Vec<_>>(), [PID, PID + 1, PID + 2, PID + 3]);
        let (main, w1, w2, w3) = (&rows[0], &rows[1], &rows[2], &rows[3]);
        assert_eq!(main.calls_per_s, Some(0.0));
        assert_eq!(main.cpu_pct, Some(0.0));
        assert_eq!((main.run_pct, main.blocked), (None, None));
        assert_eq!(w1.calls_per_s, Some(3000.0));
        assert_eq!(w1.calls, 2500);
        assert_eq!(w1.cpu_pct, Some(50.0));
        assert_eq!(w1.name.as_deref(), Some("spin-a"));
        // 300 RUN, 50 MUTEX, 50 CONDVAR in the interval: the tie goes to the lower state.
        assert_eq!(w1.run_pct, Some(75.0));
        assert_eq!(w1.blocked, Some((STATE_BLOCKED_MUTEX, 12.5)));
        // Gone: shown once more, no CPU, its state "gone".
        assert_eq!((w2.state, w2.alive, w2.cpu_pct, w2.calls_per_s), ("gone", false, None, Some(0.0)));
        // New: everything it did is in the interval.
        assert_eq!((w3.calls_per_s, w3.cpu_pct), (Some(800.0), Some(10.0)));

        // The next interval no longer shows the thread that went away.
        let r2 = reading(&b1, t1 + Duration::from_secs(1), &[(PID, 10), (PID + 1, 251_000_000)], &[PID, PID + 1]);
        let rows = thread_rows(Some(&r1), &r2);
        assert_eq!(rows.iter().map(|r| r.tid).collect::<Vec<_>>(), [PID, PID + 1, PID + 3]);
        assert_eq!(rows[2].state, "gone");

        // The first frame: totals, no rates.
        let rows = thread_rows(None, &r1);
        assert_eq!(rows.iter().map(|r| r.tid).collect::<Vec<_>>(), [PID, PID + 1, PID + 3]);
        assert_eq!((rows[1].calls_per_s, rows[1].cpu_pct), (None, None));
        assert_eq!(rows[1].run_pct, Some(400.0 * 100.0 / 600.0));
        assert_eq!(rows[1].blocked, Some((STATE_BLOCKED_MUTEX, 25.0)));

        // Functions: work over all threads, 1500 + 400 calls in the interval.
        let view = View::default();
        let f = function_rows(Some(&r0), &r1, &view);
        assert_eq!(f.iter().map(|f| f.name.as_str()).collect::<Vec<_>>(), ["work", "idle", "main"]);
        assert_eq!((f[0].calls, f[0].calls_delta), (2900, Some(1900)));
        assert_eq!((f[1].calls_delta, f[2].calls_delta), (Some(0), Some(0)));
        // No interval: by total calls.
        let f = function_rows(None, &r1, &view);
        assert_eq!(
            f.iter().map(|f| (f.name.as_str(), f.calls_delta)).collect::<Vec<_>>(),
            [("work", None), ("idle", None), ("main", None)]
        );
        // One thread: only its functions.
        let one = View { thread: Some(PID + 3), ..View::default() };
        let f = function_rows(Some(&r0), &r1, &one);
        assert_eq!(
            f.iter().map(|f| (f.name.as_str(), f.calls, f.calls_delta)).collect::<Vec<_>>(),
            [("work", 400, Some(400))]
        );

        // A reading of another run (same path, new process) is no baseline.
        let mut other = r0.clone();
        other.profile.start_realtime_ns += 1;
        assert_eq!(thread_rows(Some(&other), &r1)[1].calls_per_s, None);
    }

    #[test]
    fn lock_waits_over_the_interval() {
        let t0 = Instant::now();
        let w = |wait_ticks, count| WaitEntry {
            object: 1,
            kind: OBJ_MUTEX,
            count,
            contended: 2,
            wait_ticks,
            hold_ticks: 0,
            ..Default::default()
        };
        let mut b0 = file(10, 10, None);
        put_wait(&mut b0, 1, 0, &w(1_000_000, 10));
        let r0 = reading(&b0, t0, &[], &[PID, PID + 1, PID + 2]);
        let mut b1 = file(10, 10, None);
        put_wait(&mut b1, 1, 0, &w(101_000_000, 30));
        put_wait(&mut b1, 2, 0, &w(50_000_000, 5));
        let r1 = reading(&b1, t0 + Duration::from_millis(500), &[], &[PID, PID + 1, PID + 2]);
        let rows = lock_rows(Some(&r0), &r1, &View::default());
        assert_eq!(rows.len(), 1);
        let l = &rows[0];
        assert_eq!((l.kind, l.address, l.first_used_in.as_deref()), ("mutex", Some(0x5000), Some("work")));
        assert_eq!((l.wait_ns, l.wait_delta_ns), (Some(151_000_000), Some(150_000_000)));
        assert_eq!((l.calls, l.calls_delta, l.contended), (35, Some(25), 4));
        let screen = Screen::new(Some(&r0), &r1, &View::default());
        assert_eq!(screen.locks.rows[0][..5], ["30.0", "151.0", "50", "35", "4"]);
        // Only thread 2's share.
        let rows = lock_rows(Some(&r0), &r1, &View { thread: Some(PID + 2), ..View::default() });
        assert_eq!((rows[0].wait_delta_ns, rows[0].calls), (Some(50_000_000), 5));
    }

    #[test]
    fn text_frame() {
        let t0 = Instant::now();
        let b = file(1000, 50, None);
        let r0 = reading(&b, t0, &[(PID, 0), (PID + 1, 0), (PID + 2, 0)], &[PID, PID + 1, PID + 2]);
        let b = file(2000, 50, None);
        let r1 = reading(
            &b,
            t0 + Duration::from_secs(1),
            &[(PID, 0), (PID + 1, 900_000_000), (PID + 2, 0)],
            &[PID, PID + 1, PID + 2],
        );
        let text = Screen::new(Some(&r0), &r1, &View::default()).to_text();
        let (a, b) = (PID + 1, PID + 2);
        let want = [
            format!("program srv  pid {PID}  running  uptime 5.0 s  threads 3/3 live"),
            "metrics on: calls cpu_time wall_time lock_wait lock_hold state_trace  snapshot: none  control file: none"
                .into(),
            "interval 1.00 s  functions and lock waits of all threads, by calls".into(),
            "".into(),
            "THREADS".into(),
            "TID         STATE  CPU%  RUN%  BLOCKED%  BLOCKED  CALLS/S  CALLS  MASK  NAME".into(),
            format!("{PID}  RUN     0.0     -         -  -              0      1  none  -"),
            format!("{a}  RUN    90.0     -         -  -           1.0k   2000  none  spin-a"),
            format!("{b}  RUN     0.0     -         -  -              0     50  none  -"),
            "".into(),
            "TOP FUNCTIONS".into(),
            "CALLS/S  CALLS  ADDRESS  FUNCTION".into(),
            "   1.0k   2000  0x1100   work".into(),
            "      0     50  0x1200   idle".into(),
            "      0      1  0x1000   main".into(),
            "".into(),
            "LOCK WAITS".into(),
            "(no waits: lock_wait is off, or no wrapped thread-library call ran)".into(),
            "".into(),
            "rates and %: over the last 1.00 s. CPU%: on a CPU (kernel); RUN%, BLOCKED%: of the thread's observed \
             time; function CPU%, WALL%, lock WAIT%: inclusive time in the interval over its length, summed over \
             threads; -MS: totals since the start"
                .into(),
        ]
        .map(|l: String| l + "\n")
        .concat();
        assert_eq!(text, want);
        // Rows start with the tid; no escape codes.
        assert!(!text.contains('\x1b'));
    }

    #[test]
    fn ended_process_shows_every_thread_and_its_last_event() {
        let mut b = file(10, 10, None);
        patch_column(&mut b, 2, |c| {
            c.thread_state = STATE_EXITED;
            c.last_tsc = SYNTHETIC_START_TSC + 2_500_000_000;
        });
        let p = parse_with(&b, &Observer::ENDED).unwrap();
        let r = Reading { profile: p, at: Instant::now(), realtime_ns: 0, cpu_ns: HashMap::new() };
        let s = Screen::new(None, &r, &View::default());
        assert!(s.header[0].contains("ended  last event at 2.5 s  threads 0/3 live"), "{}", s.header[0]);
        assert_eq!(s.threads.rows.iter().map(|r| r[1].as_str()).collect::<Vec<_>>(), ["gone", "gone", "EXITED"]);
        assert!(s.header[2].contains("one reading"));
        assert!(s.legend.starts_with("one reading"));
    }

    #[test]
    fn metrics_on_and_masks() {
        let mut b = file(10, 10, None);
        // Gates: calls and lock_wait only; thread 1 measures calls only.
        let h = stint_layout::FileHeader::parse(&b, b.len() as u64).unwrap();
        for i in 0..3 {
            b[h.ctl_offset as usize + i] = metric_bit(0) | metric_bit(3);
        }
        for i in 0..3 {
            patch_column(&mut b, i, |c| c.thread_mask = 0xff);
        }
        patch_column(&mut b, 1, |c| c.thread_mask = 1);
        let r = reading(&b, Instant::now(), &[], &[PID, PID + 1, PID + 2]);
        assert_eq!(metrics_on(&r.profile), 0b1001);
        let s = Screen::new(None, &r, &View::default());
        assert!(s.header[1].starts_with("metrics on: calls lock_wait  (off: cpu_time wall_time lock_hold state_trace)"));
        let mask = s.threads.head.iter().position(|h| *h == "MASK").unwrap();
        assert_eq!(s.threads.rows.iter().map(|r| r[mask].as_str()).collect::<Vec<_>>(), ["all", "calls", "all"]);
        // All threads measuring everything: no MASK column.
        for i in 0..3 {
            patch_column(&mut b, i, |c| c.thread_mask = 0xff);
        }
        let r = reading(&b, Instant::now(), &[], &[PID, PID + 1, PID + 2]);
        assert!(!Screen::new(None, &r, &View::default()).threads.head.contains(&"MASK"));
    }
}
