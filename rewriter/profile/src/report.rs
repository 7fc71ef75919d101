//! Rendering a [`Profile`] for people: the tables `stint report` prints, and the queries
//! the tables and the JSON contract ([`crate::json`]) share (which functions a thread called,
//! what an address is named, when a thread started and ended).
//!
//! Threads come in column order (registration order). Functions are named as D14 says, by the
//! names the rewriter put in the meta; a function reached through several points appears once
//! with their calls summed. Only functions a thread called are listed, most calls first.
//!
//! Threads also carry their record (creator, lifetime, how they ended), the time they spent
//! in each state, and their waits per sync object; the top level lists the sync objects
//! (named by address and by the function that first used them). An address in the input ELF
//! (a start routine, the caller that first used an object) is named by the function that
//! contains it ([`Profile::function_at`]), else given in hex. Besides the per-function table
//! ([`to_table_with`]) the profile renders per sync object ([`to_lock_table`]) and per thread
//! ([`to_thread_table`]).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use crate::profile::{ObjectProfile, Profile, ThreadProfile, WaitProfile};
use stint_layout::{
    exit_kind_name, object_kind_name, state_name, EXIT_UNKNOWN, N_STATES, OBJ_MUTEX, OBJ_RWLOCK, STATE_EXITED,
    STATE_RUN,
};

/// `schema` of the JSON report.
pub use crate::json::SCHEMA;

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
    /// Whether the times mean anything: timed, metric off, or calls only.
    pub timing: Timing,
    /// The times include a call still running when the file was read, counted up to then.
    pub running: bool,
    /// Self CPU and wall time in ns (inclusive minus the timed callees, summed over the
    /// function's call paths, D16); `None` when the thread has no call paths or the function
    /// is in none (calls only).
    pub self_cpu_ns: Option<u64>,
    pub self_wall_ns: Option<u64>,
    /// The times are estimates from one call in N (short and frequent calls, sampled by the
    /// runtime); the calls are exact.
    pub sampled: Option<SampledCalls>,
}

/// How a sampled function's times were estimated ([`FunctionCalls::sampled`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SampledCalls {
    /// Timed calls of the function (its times are theirs × calls / timed).
    pub timed: u64,
    /// Calls of its sampled points (exact).
    pub calls: u64,
    /// Error bounds of the CPU and wall estimates, ns (twice the standard error, ≈ 95 %).
    pub cpu_bound_ns: Option<u64>,
    pub wall_bound_ns: Option<u64>,
}

/// What the time figures of a [`FunctionCalls`] row are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Timing {
    /// Measured (`cpu_ns`/`wall_ns` are `None` only without a TSC calibration).
    Timed,
    /// The timer metrics were off: the profile has none (the spec measured calls only), or
    /// the function is timed but no time was recorded for it and its timers are off now
    /// (gate or thread mask, `stint ctl disable`).
    Off,
    /// Timed, timers on, called, but no time recorded: no call of it returned while timed and
    /// its thread no longer runs (it never returned, like `_start`, or the thread ended unseen).
    /// A call still running on a live thread is counted up to the reading instead
    /// (`FunctionCalls::running`).
    Open,
    /// The profile has timers but not this function: calls only (the spec left it out, or
    /// not all of its exits could be patched; `stint inspect --skipped` says which).
    CallsOnly,
}

/// Whether thread `t` measures the timers of the function `(name, address)` now: the
/// gate of one of its timed points and the thread's mask both have a timer bit (a file
/// without a readable control region counts as on).
fn timers_on(p: &Profile, t: &ThreadProfile, name: &str, address: &str) -> bool {
    let thread_on = (t.thread_mask & u32::from(stint_layout::TIMER_BITS)) != 0;
    thread_on
        && p.points.iter().any(|pm| {
            pm.function == name
                && pm.address == address
                && p.timed(pm.id)
                && p.gates.get(pm.id as usize).is_none_or(|g| g & stint_layout::TIMER_BITS != 0)
        })
}

/// Whether the profile measures times at all: its meta has a timer metric (`cpu_time` or
/// `wall_time`) and some point has a timer bit (the rewriter lists every metric in the meta,
/// so a calls-only spec shows in the points only).
pub fn has_timers(p: &Profile) -> bool {
    p.metrics.iter().any(|m| m.name == crate::profile::CPU_METRIC || m.name == crate::profile::WALL_METRIC)
        && p.points.iter().any(|pm| pm.bits & stint_layout::TIMER_BITS != 0)
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
    let timers = has_timers(p);
    let running = |name: &str, address: &str| {
        t.open_frames.iter().filter_map(|&id| p.point(id)).any(|pm| pm.function == name && pm.address == address)
    };
    let mut selfs: BTreeMap<(String, String), (u64, u64)> = BTreeMap::new();
    for (n, (c, w)) in t.calltree.iter().zip(crate::calltree::self_ticks(&t.calltree)) {
        let e = selfs.entry(key(n.point)).or_default();
        e.0 = e.0.saturating_add(c);
        e.1 = e.1.saturating_add(w);
    }
    let mut sampled: BTreeMap<(String, String), (u64, u64, u64, u64)> = BTreeMap::new();
    for sp in &t.sampled {
        let e = sampled.entry(key(sp.point)).or_default();
        e.0 = e.0.saturating_add(sp.timed);
        e.1 = e.1.saturating_add(sp.calls);
        e.2 = e.2.saturating_add(sp.cpu_bound_ticks);
        e.3 = e.3.saturating_add(sp.wall_bound_ticks);
    }
    let mut rows: Vec<_> = sums
        .into_iter()
        .map(|((name, address), (calls, cpu, wall, timed))| FunctionCalls {
            self_cpu_ns: selfs.get(&(name.clone(), address.clone())).and_then(|s| p.ticks_to_ns(s.0)),
            self_wall_ns: selfs.get(&(name.clone(), address.clone())).and_then(|s| p.ticks_to_ns(s.1)),
            timing: match (timers, timed) {
                (false, _) => Timing::Off,
                (true, false) => Timing::CallsOnly,
                // Measured, then compensated to nothing: a time of 0, not an open call.
                (true, true) if t.compensated_to_zero.iter().any(|&pt| key(pt) == (name.clone(), address.clone())) => {
                    Timing::Timed
                }
                (true, true) if cpu == 0 && wall == 0 && !timers_on(p, t, &name, &address) => Timing::Off,
                (true, true) if cpu == 0 && wall == 0 => Timing::Open,
                (true, true) => Timing::Timed,
            },
            running: running(&name, &address),
            sampled: sampled.get(&(name.clone(), address.clone())).map(|&(timed, calls, cpu, wall)| SampledCalls {
                timed,
                calls,
                cpu_bound_ns: p.ticks_to_ns(cpu),
                wall_bound_ns: p.ticks_to_ns(wall),
            }),
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

/// The function name of point `point` (`point N` for a point the meta does not name).
pub fn point_name(p: &Profile, point: u32) -> String {
    p.point(point).map_or_else(|| format!("point {point}"), |pm| pm.function.clone())
}

/// Name of the function of the thread's first point.
pub fn first_function<'a>(p: &'a Profile, t: &ThreadProfile) -> Option<&'a str> {
    t.first_point.and_then(|id| p.point(id)).map(|pm| pm.function.as_str())
}

/// The thread's start routine: the name of the function at that address, else the address
/// in hex.
pub fn start_routine(p: &Profile, t: &ThreadProfile) -> Option<String> {
    t.start_routine.map(|addr| code_name(p, addr))
}

/// The name of the function that contains `pc` (an address in the input ELF), else `pc` in
/// hex.
pub fn code_name(p: &Profile, pc: u64) -> String {
    match p.function_at(pc) {
        Some(pm) => pm.function.clone(),
        None => format!("{pc:#x}"),
    }
}

/// The threads a thread object (a `pthread_t` that was joined or detached) stands for: those
/// whose thread pointer is its address (glibc's `pthread_t` is the thread's TCB address).
/// Usually one; a TCB reused by a later thread after the join gives several.
pub fn object_threads<'a>(p: &'a Profile, o: &ObjectProfile) -> Vec<&'a ThreadProfile> {
    if o.kind != stint_layout::OBJ_THREAD || o.address == 0 {
        return Vec::new();
    }
    p.threads.iter().filter(|t| t.owner_tp == o.address).collect()
}

/// What an object is, beyond its address: its data symbol (`big_lock`, `_PyRuntime+0x1a8`,
/// after [`Profile::resolve_names`]), or for a thread object the thread(s) it is (`thread
/// 1235 worker`); `None` for a heap object or an unknown thread.
pub fn object_name(p: &Profile, o: &ObjectProfile) -> Option<String> {
    if let Some(s) = &o.symbol {
        return Some(s.clone());
    }
    let threads = object_threads(p, o);
    if threads.is_empty() {
        return None;
    }
    let one = |t: &ThreadProfile| match &t.name {
        Some(n) => format!("{} {n}", t.tid),
        None => t.tid.to_string(),
    };
    let list: Vec<String> = threads.iter().map(|t| one(t)).collect();
    Some(format!("{} {}", if list.len() == 1 { "thread" } else { "threads" }, list.join(", ")))
}

/// The object `index` for tables: `0x4040a0 (big_lock)`, else its address in hex.
pub fn object_label(p: &Profile, index: u32) -> Option<String> {
    let o = p.object(index)?;
    Some(match object_name(p, o) {
        Some(n) => format!("{:#x} ({n})", o.address),
        None => format!("{:#x}", o.address),
    })
}

/// The function that made the thread's longest call on the object (`None` if the runtime did
/// not record it).
pub fn longest_wait_in(p: &Profile, w: &WaitProfile) -> Option<String> {
    (w.longest_pc != 0).then(|| code_name(p, w.longest_pc))
}

/// The function that first used the object (`None` if the runtime did not record a caller).
pub fn first_used_in(p: &Profile, o: &ObjectProfile) -> Option<String> {
    (o.first_pc != 0).then(|| code_name(p, o.first_pc))
}

/// `mutex`, `condvar`, … of an `OBJ_*` value (`unknown` for others).
pub(crate) fn kind_name(kind: u32) -> &'static str {
    object_kind_name(kind).unwrap_or("unknown")
}

/// The address of object `index` in hex, if the profile has it.
pub(crate) fn object_address(p: &Profile, index: u32) -> Option<String> {
    p.object(index).map(|o| format!("{:#x}", o.address))
}

/// Name of a `STATE_*` value (`unknown` for others).
pub(crate) fn state_label(s: u32) -> &'static str {
    state_name(s).unwrap_or("unknown")
}

/// The thread's waits, most wait time first (then by object index).
pub fn waits_by_time(t: &ThreadProfile) -> Vec<&WaitProfile> {
    let mut w: Vec<&WaitProfile> = t.waits.iter().collect();
    w.sort_by_key(|w| (std::cmp::Reverse(w.wait_ticks), w.object));
    w
}

/// ns from the process's start to the thread's registration.
pub fn start_ns(p: &Profile, t: &ThreadProfile) -> u64 {
    t.registered_monotonic_ns.saturating_sub(p.start_monotonic_ns)
}

/// ns from the process's start to the thread's end, if the runtime saw it end.
pub fn end_ns(p: &Profile, t: &ThreadProfile) -> Option<u64> {
    t.end_monotonic_ns.map(|e| e.saturating_sub(p.start_monotonic_ns))
}

/// The `stint-profile/1` document ([`crate::json::profile_json`]) as a `serde_json::Value`,
/// for readers that index it by key.
pub fn to_json(p: &Profile) -> serde_json::Value {
    // The document's types serialise without failing: every map key is a string.
    serde_json::to_value(crate::json::profile_json(p)).unwrap_or_default()
}

/// ns from the process's start: until `now_realtime_ns` if it runs, else until the last
/// thing the runtime recorded (a thread's end or last wrapper event).
pub fn uptime_ns(p: &Profile, now_realtime_ns: u64) -> Option<u64> {
    if p.alive {
        return now_realtime_ns.checked_sub(p.start_realtime_ns);
    }
    let ends = p.threads.iter().filter_map(|t| end_ns(p, t));
    let events = p.threads.iter().filter(|t| t.last_tsc != 0).filter_map(|t| p.tsc_to_ns_since_start(t.last_tsc));
    ends.chain(events).max()
}

/// What a function table is sorted by (most first; ties by calls, then name, then address).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SortBy {
    Calls,
    /// Inclusive CPU time; functions without a measured time come last.
    #[default]
    Cpu,
    /// Inclusive wall time; functions without a measured time come last.
    Wall,
    /// Self CPU time (call paths); functions without one come last.
    SelfCpu,
}

/// How much of the profile the table shows, and in which order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TableOptions {
    /// At most this many functions per thread (the rest are summed in one line); all if
    /// `None` or `Some(0)`.
    pub top: Option<usize>,
    /// The order of the functions; `None`: CPU time (as `Some(Cpu)`, except that a profile
    /// without timers keeps the narrow table: the timer columns show only when asked for).
    pub sort: Option<SortBy>,
    /// Only the threads [`thread_matches`] selects.
    pub thread: Option<String>,
    /// Shorten function names (in the middle, with `…`) so that lines fit in this many
    /// columns; names keep at least [`MIN_SHORT_NAME`] characters. Unlimited if `None`.
    pub width: Option<usize>,
}

/// Names are never shortened below this many characters, whatever `--width` says.
pub const MIN_SHORT_NAME: usize = 12;

/// Whether thread `t` is selected by `pat`: a number is a kernel tid (exact), anything else
/// a glob (`*`, `?`) on the thread's name or on its start routine's name.
pub fn thread_matches(p: &Profile, t: &ThreadProfile, pat: &str) -> bool {
    if let Ok(tid) = pat.parse::<u32>() {
        return t.tid == tid;
    }
    let glob = |s: &str| stint_layout::glob::glob_match(pat.as_bytes(), s.as_bytes());
    t.name.as_deref().is_some_and(glob) || start_routine(p, t).is_some_and(|s| glob(&s))
}

/// The threads `pat` selects (all if `None`), in column order.
pub fn select_threads<'a>(p: &'a Profile, pat: Option<&str>) -> Vec<&'a ThreadProfile> {
    p.threads.iter().filter(|t| pat.is_none_or(|pat| thread_matches(p, t, pat))).collect()
}

/// The measured time a row is sorted by (`None`: off, calls only or uncalibrated).
fn sort_time(f: &FunctionCalls, sort: SortBy) -> Option<u64> {
    if f.timing != Timing::Timed {
        return None;
    }
    match sort {
        SortBy::Calls => None,
        SortBy::Cpu => f.cpu_ns,
        SortBy::Wall => f.wall_ns,
        SortBy::SelfCpu => f.self_cpu_ns,
    }
}

/// Sort rows by `sort`, most first; ties by calls (most first), then name, then address.
pub fn sort_functions(rows: &mut [FunctionCalls], sort: SortBy) {
    rows.sort_by(|a, b| {
        sort_time(b, sort)
            .cmp(&sort_time(a, sort))
            .then(b.calls.cmp(&a.calls))
            .then_with(|| a.name.cmp(&b.name))
            .then_with(|| a.address.cmp(&b.address))
    });
}

/// The functions thread `t` called, in the order `sort` gives.
pub fn functions_sorted(p: &Profile, t: &ThreadProfile, sort: SortBy) -> Vec<FunctionCalls> {
    let mut rows = functions(p, t);
    sort_functions(&mut rows, sort);
    rows
}

/// `name` shortened to at most `max` characters by replacing its middle with `…`.
pub fn shorten_middle(name: &str, max: usize) -> String {
    let n = name.chars().count();
    if n <= max || max == 0 {
        return name.to_owned();
    }
    let keep = max - 1;
    let head = keep.div_ceil(2);
    let tail = keep - head;
    let mut out: String = name.chars().take(head).collect();
    out.push('…');
    out.extend(name.chars().skip(n - tail));
    out
}

/// The whole profile as a table.
pub fn to_table(p: &Profile) -> String {
    to_table_with(p, &TableOptions::default())
}

/// The profile as a table: a line about the process, then per thread a heading and its
/// functions, then the totals.
///
/// ```text
/// program pigz  pid 1234  threads 2  (skipped reentrant events: 0)
///
/// thread 1234 (main)
///   calls  address  function
///       1  0x1139   main
///
/// thread 1235  first: worker
///   calls  address  function
///    1000  0x11c0   mid
///
/// total: 2 threads, 1001 calls
/// ```
///
/// With timers the columns `cpu ms`, `wall ms` and `cpu/call us` come after the calls: `off`
/// where the metric was off, `-` for a function measured by calls only (a footer says why).
pub fn to_table_with(p: &Profile, opts: &TableOptions) -> String {
    struct Section {
        heading: String,
        shown: Vec<FunctionCalls>,
        /// Functions left out by `top`, and their calls.
        hidden: (usize, u64),
    }
    let sort = opts.sort.unwrap_or_default();
    let threads = select_threads(p, opts.thread.as_deref());
    let mut sections: Vec<Section> = threads
        .iter()
        .map(|t| {
            let mut shown = functions_sorted(p, t, sort);
            let keep = opts.top.filter(|&n| n > 0).unwrap_or(usize::MAX).min(shown.len());
            let rest = shown.split_off(keep);
            let hidden = (rest.len(), rest.iter().fold(0u64, |s, f| s.saturating_add(f.calls)));
            Section { heading: thread_heading(p, t), shown, hidden }
        })
        .collect();

    // Timer columns when some function is timed, or when the order asked for is by a timer:
    // call-count-only profiles keep the narrow table.
    let timed = sections.iter().flat_map(|s| &s.shown).any(|f| f.wall_ns.is_some() || f.cpu_ns.is_some())
        || matches!(opts.sort, Some(SortBy::Cpu | SortBy::Wall | SortBy::SelfCpu));
    // Self columns when some shown thread has call paths (D16).
    let selfs = timed && threads.iter().any(|t| !t.calltree.is_empty());
    let widest_calls = sections.iter().flat_map(|s| s.shown.iter().map(|f| f.calls).chain([s.hidden.1])).max();
    let calls_w = widest_calls.unwrap_or(0).to_string().len().max("calls".len());
    let addr_w = sections
        .iter()
        .flat_map(|s| &s.shown)
        .map(|f| f.address.chars().count())
        .chain(["address".len()])
        .max()
        .unwrap_or(0);
    if let Some(width) = opts.width {
        // `cpu/call us` is one wider than its column's values.
        let fixed = 2
            + calls_w
            + 2
            + if timed { 11 + 2 + 11 + 2 + "cpu/call us".len() + 2 } else { 0 }
            + if selfs { 2 * (12 + 2) } else { 0 }
            + 2
            + addr_w;
        let max = width.saturating_sub(fixed).max(MIN_SHORT_NAME);
        for f in sections.iter_mut().flat_map(|s| &mut s.shown) {
            f.name = shorten_middle(&f.name, max);
        }
    }

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
    if let Some(line) = process_line(p) {
        out.push_str(&line);
        out.push('\n');
    }
    if timed {
        if let Some(line) = compensation_line(p) {
            out.push_str(&line);
            out.push('\n');
        }
    }

    let mut calls_only = 0usize;
    let mut off = 0usize;
    let mut open = 0usize;
    let mut running = 0usize;
    let mut sampled: Vec<FunctionCalls> = Vec::new();
    for s in &sections {
        let _ = write!(out, "\n{}\n", s.heading);
        if s.shown.is_empty() && s.hidden.0 == 0 {
            out.push_str("  (no calls)\n");
            continue;
        }
        let mut times = |f: &FunctionCalls| -> String {
            if !timed {
                return String::new();
            }
            let (cpu, wall, per_call) = match f.timing {
                Timing::Off => {
                    off += 1;
                    ("off".into(), "off".into(), "off".into())
                }
                Timing::CallsOnly => {
                    calls_only += 1;
                    ("-".into(), "-".into(), "-".into())
                }
                Timing::Open => {
                    open += 1;
                    ("open".into(), "open".into(), "open".into())
                }
                Timing::Timed if f.running => {
                    running += 1;
                    // Per call means nothing while a call is still running.
                    (format!("{}+", ms(f.cpu_ns)), format!("{}+", ms(f.wall_ns)), "-".into())
                }
                Timing::Timed if f.sampled.is_some() => {
                    sampled.push(f.clone());
                    let per_call = f.cpu_ns.filter(|_| f.calls > 0).map(|c| c as f64 / f.calls as f64 / 1e3);
                    (
                        format!("~{}", ms(f.cpu_ns)),
                        format!("~{}", ms(f.wall_ns)),
                        per_call.map_or("-".into(), |us| format!("~{us:.3}")),
                    )
                }
                Timing::Timed => {
                    let per_call = f.cpu_ns.filter(|_| f.calls > 0).map(|c| c as f64 / f.calls as f64 / 1e3);
                    (ms(f.cpu_ns), ms(f.wall_ns), per_call.map_or("-".into(), |us| format!("{us:.3}")))
                }
            };
            // Self times where the inclusive ones are measured; the same mark otherwise.
            let (self_cpu, self_wall) = match f.timing {
                Timing::Timed => (ms(f.self_cpu_ns), ms(f.self_wall_ns)),
                _ => (cpu.clone(), wall.clone()),
            };
            let self_cols = if selfs { format!("{self_cpu:>12}  {self_wall:>12}  ") } else { String::new() };
            format!("{cpu:>11}  {wall:>11}  {self_cols}{per_call:>10}  ")
        };
        let self_head = if selfs { format!("{:>12}  {:>12}  ", "self cpu ms", "self wall ms") } else { String::new() };
        let head = if timed {
            format!("{:>11}  {:>11}  {self_head}{:>10}  ", "cpu ms", "wall ms", "cpu/call us")
        } else {
            String::new()
        };
        // The name last: long (C++) names never push the figures out of line.
        let _ = writeln!(out, "  {:>calls_w$}  {head}{:<addr_w$}  function", "calls", "address");
        for f in &s.shown {
            let line = format!("  {:>calls_w$}  {}{:<addr_w$}  {}", f.calls, times(f), f.address, f.name);
            let _ = writeln!(out, "{}", line.trim_end());
        }
        if s.hidden.0 > 0 {
            let more = if s.hidden.0 == 1 { "function" } else { "functions" };
            let _ = writeln!(out, "  {:>calls_w$}  … {} more {more} (--top 0 for all)", s.hidden.1, s.hidden.0);
        }
    }
    let calls = threads.iter().fold(0u64, |s, t| s.saturating_add(t.total_calls()));
    if threads.len() == p.threads.len() {
        let _ = write!(out, "\ntotal: {} threads, {calls} calls\n", p.threads.len());
    } else {
        let _ = write!(out, "\ntotal: {} of {} threads, {calls} calls\n", threads.len(), p.threads.len());
    }
    if timed && has_timers(p) {
        let sources: std::collections::BTreeSet<&str> =
            threads.iter().filter_map(|t| t.clock_source.as_deref()).collect();
        let sources: Vec<&str> = sources.into_iter().collect();
        let sum = |f: fn(&ThreadProfile) -> u64| threads.iter().fold(0u64, |s, t| s.saturating_add(f(t)));
        let _ = writeln!(
            out,
            "times: inclusive; cpu clock: {}; frames closed after exception/longjmp: {}; timer events skipped in signal handlers: {}",
            if sources.is_empty() { "-".to_string() } else { sources.join(", ") },
            sum(|t| t.abandoned_frames),
            sum(|t| t.timer_skipped),
        );
    }
    if calls_only > 0 {
        out.push_str(
            "-: calls only (not timed: the spec left it out, not all of its exits could be patched (stint inspect --skipped), or a thread-library call (waits: --by lock))\n",
        );
    }
    if running > 0 {
        out.push_str("+: includes a call still running when the profile was read, counted up to then\n");
    }
    if !sampled.is_empty() {
        out.push_str(
            "~: estimated from one call in N (short, frequent calls, stint rewrite --sampling; counts exact):\n",
        );
        let mut seen = std::collections::BTreeSet::new();
        for f in sampled.iter().filter(|f| seen.insert((f.name.clone(), f.address.clone()))) {
            let Some(sc) = f.sampled else { continue };
            let _ = writeln!(
                out,
                "   {}: timed {} of {} calls, cpu ±{} ms, wall ±{} ms",
                f.name,
                sc.timed,
                sc.calls,
                ms(sc.cpu_bound_ns),
                ms(sc.wall_bound_ns)
            );
        }
    }
    if open > 0 {
        out.push_str(
            "open: timed, but none of its calls returned before its thread ended (it never returned, like _start); time not counted\n",
        );
    }
    // D17: a function that tail-jumps into an import ends its frame at the jump.
    for pm in p.points.iter().filter(|pm| !pm.tail_jumps_to.is_empty()) {
        if threads.iter().any(|t| t.counts.iter().any(|&(id, n)| id == pm.id && n > 0)) {
            let _ = writeln!(out, "{}: time ends at tail jump to {}", pm.function, pm.tail_jumps_to.join(", "));
        }
    }
    if off > 0 {
        if has_timers(p) {
            out.push_str(
                "off: its timers are off (stint ctl ... enable cpu_time wall_time) and none of its calls was timed\n",
            );
        } else {
            out.push_str("off: the profile measured no times (its spec times no function)\n");
        }
    }
    push_warnings(&mut out, p);
    out
}

/// One `warning: …` line per thing skipped while reading.
fn push_warnings(out: &mut String, p: &Profile) {
    for w in &p.warnings {
        let _ = writeln!(out, "warning: {w}");
    }
}

/// `program pigz  pid 1234` and, for a forked child, `(forked from 1200)`.
fn program_line(p: &Profile) -> String {
    let mut out = format!("program {}  pid {}", p.program, p.pid);
    if p.fork_child() {
        let _ = write!(out, " (forked from {})", p.ppid);
    }
    out
}

/// The process line of the header (D22), for profiles that record their process (a file of
/// layout version 5 or later written by the runtime):
/// `process  parent 1200 (profile /d/p.1200.stint)  exec'd from /d/p.1201.stint  ended exec
/// argv: ./p --x`.
pub fn process_line(p: &Profile) -> Option<String> {
    let pr = &p.process;
    if pr.argc == 0 && pr.exec_from.is_none() && pr.parent_profile.is_none() {
        return None;
    }
    let mut out = format!("process  parent {}", p.ppid);
    if let Some(pp) = &pr.parent_profile {
        let _ = write!(out, " (profile {pp})");
    }
    if let Some(from) = &pr.exec_from {
        let _ = write!(out, "  exec'd from {from}");
    }
    let ended = crate::json::process_json(p).ended.map(|e| e.label());
    let _ = write!(out, "  ended {}", ended.as_deref().unwrap_or("no (running)"));
    let _ = write!(out, "  argv: {}", pr.argv.join(" "));
    if pr.argv_truncated {
        let _ = write!(out, " … ({} arguments in all)", pr.argc);
    }
    Some(out)
}

/// Milliseconds with three decimals, `-` if unknown.
fn ms(ns: Option<u64>) -> String {
    ns.map_or("-".into(), |n| format!("{:.3}", n as f64 / 1e6))
}

/// `1235 compress`, or `1235` for a thread without a name.
fn thread_label(t: &ThreadProfile) -> String {
    match &t.name {
        Some(n) => format!("{} {n}", t.tid),
        None => t.tid.to_string(),
    }
}

/// Lay out rows of cells in columns two spaces apart; `right[i]` right-aligns column `i`.
/// Trailing blanks are trimmed; every line is indented by `indent`.
pub fn columns(rows: &[Vec<String>], right: &[bool], indent: &str) -> String {
    let widths = column_widths(rows);
    let mut out = String::new();
    for r in rows {
        let mut line = String::from(indent);
        for (i, c) in r.iter().enumerate() {
            if i > 0 {
                line.push_str("  ");
            }
            let w = widths[i];
            if right.get(i).copied().unwrap_or(false) {
                let _ = write!(line, "{c:>w$}");
            } else {
                let _ = write!(line, "{c:<w$}");
            }
        }
        let _ = writeln!(out, "{}", line.trim_end());
    }
    out
}

/// The width of each column: its widest cell, in characters.
pub fn column_widths(rows: &[Vec<String>]) -> Vec<usize> {
    let n = rows.iter().map(Vec::len).max().unwrap_or(0);
    (0..n).map(|i| rows.iter().filter_map(|r| r.get(i)).map(|c| c.chars().count()).max().unwrap_or(0)).collect()
}

/// The profile per sync object: a heading per object (kind, address, the function that
/// first used it and the thread), then one row per thread that waited on it; objects by total
/// wait time, most first.
///
/// ```text
/// program pigz  pid 1234  objects 2  threads 3
///
/// mutex 0x5555555580a0  first used in: worker  by 1235
///   thread         calls  contended  wait ms  hold ms
///   1235 compress    120         30   12.500    3.250
///   1236              80         10    2.000    1.000
///   total            200         40   14.500    4.250
/// ```
pub fn to_lock_table(p: &Profile) -> String {
    // Per object: (thread, wait) in column order, and the total wait ticks.
    let mut per_object: BTreeMap<u32, Vec<(&ThreadProfile, &WaitProfile)>> = BTreeMap::new();
    for t in &p.threads {
        for w in &t.waits {
            per_object.entry(w.object).or_default().push((t, w));
        }
    }
    let total = |v: &[(&ThreadProfile, &WaitProfile)]| v.iter().fold(0u64, |s, (_, w)| s.saturating_add(w.wait_ticks));
    let mut objects: Vec<(&ObjectProfile, Vec<(&ThreadProfile, &WaitProfile)>)> =
        p.objects.iter().map(|o| (o, per_object.remove(&o.index).unwrap_or_default())).collect();
    objects.sort_by_key(|(o, v)| (std::cmp::Reverse(total(v)), o.index));

    let mut out = program_line(p);
    let _ = write!(out, "  objects {}  threads {}", p.objects.len(), p.threads.len());
    if p.objects_lost != 0 {
        let _ = write!(out, "  (objects not recorded, table full: {})", p.objects_lost);
    }
    out.push('\n');
    if objects.is_empty() {
        out.push_str("\n(no sync objects: the lock_wait metric was off, or no wrapped thread-library call ran)\n");
    }
    for (o, mut waits) in objects {
        let _ = write!(out, "\n{} {:#x}", o.kind_name(), o.address);
        if let Some(name) = object_name(p, o) {
            let _ = write!(out, " ({name})");
        }
        if let Some(f) = first_used_in(p, o) {
            let _ = write!(out, "  first used in: {f}");
        }
        if o.first_tid != 0 {
            let _ = write!(out, "  by {}", o.first_tid);
        }
        out.push('\n');
        if waits.is_empty() {
            out.push_str("  (no waits recorded)\n");
            continue;
        }
        waits.sort_by_key(|(_, w)| std::cmp::Reverse(w.wait_ticks));
        let holds = matches!(o.kind, OBJ_MUTEX | OBJ_RWLOCK);
        // Which function each thread waited in longest, when the runtime recorded it.
        let callers = waits.iter().any(|(_, w)| w.longest_pc != 0);
        let row = |label: String, count: u64, contended: u64, wait: u64, hold: u64| {
            vec![
                label,
                count.to_string(),
                contended.to_string(),
                ms(p.ticks_to_ns(wait)),
                if holds { ms(p.ticks_to_ns(hold)) } else { "-".into() },
            ]
        };
        let mut rows = vec![["thread", "calls", "contended", "wait ms", "hold ms"].map(String::from).to_vec()];
        if callers {
            rows[0].push("longest wait in".into());
        }
        for (t, w) in &waits {
            let mut r = row(thread_label(t), w.count, w.contended, w.wait_ticks, w.hold_ticks);
            if callers {
                r.push(longest_wait_in(p, w).unwrap_or_else(|| "-".into()));
            }
            rows.push(r);
        }
        if waits.len() > 1 {
            let sum = |f: fn(&WaitProfile) -> u64| waits.iter().fold(0u64, |s, (_, w)| s.saturating_add(f(w)));
            rows.push(row(
                "total".into(),
                sum(|w| w.count),
                sum(|w| w.contended),
                sum(|w| w.wait_ticks),
                sum(|w| w.hold_ticks),
            ));
            if callers {
                rows.last_mut().expect("the total row").push(String::new());
            }
        }
        out.push_str(&columns(&rows, &[false, true, true, true, true, false], "  "));
    }
    out.push_str(
        "\ncalls: calls that acquired or waited successfully; contended: of those, the ones that found a mutex \
         locked (other kinds: that blocked over 1 µs); wait: time blocked in the calls; hold: time a mutex or \
         rwlock was held\n",
    );
    push_warnings(&mut out, p);
    out
}

/// Column heading of a state in the thread table: `RUN%`, `MUTEX%`, …
fn state_heading(s: u32) -> String {
    let name = state_label(s);
    format!("{}%", name.strip_prefix("BLOCKED_").unwrap_or(name))
}

/// The profile per thread: one row per thread with its record (name, start routine, creator,
/// lifetime, how it ended), the share of its time in each state (RUN and every BLOCKED_*
/// state some thread was in) and its total wait.
///
/// ```text
/// program pigz  pid 1234  threads 2  (process ended)
///
///    tid  name      start routine  creator  lifetime ms      exit      RUN%  MUTEX%  wait ms
///   1234  -         -              -        0.001 → ?        unknown   90.0    10.0    1.000
///   1235  compress  worker         1234     0.020 → 10.000   returned  50.0    50.0    4.990
/// ```
pub fn to_thread_table(p: &Profile) -> String {
    let shown: Vec<u32> = (0..N_STATES)
        .filter(|&s| s == STATE_RUN || (s != STATE_EXITED && p.threads.iter().any(|t| t.state_ticks[s as usize] != 0)))
        .collect();
    let mut out = program_line(p);
    let _ =
        writeln!(out, "  threads {}  ({})", p.threads.len(), if p.alive { "process running" } else { "process ended" });
    if p.threads.is_empty() {
        push_warnings(&mut out, p);
        return out;
    }
    out.push('\n');
    let mut head: Vec<String> =
        ["tid", "name", "start routine", "creator", "lifetime ms", "exit"].map(String::from).to_vec();
    head.extend(shown.iter().map(|&s| state_heading(s)));
    // RUN split by the scheduler's figures (issue 12), when some thread has them.
    let split = p.threads.iter().any(|t| t.run_split(p.tsc_hz).is_some());
    if split {
        head.extend(["CPU%", "OFFCPU%", "RUNQ%"].map(String::from));
    }
    head.push("wait ms".into());
    let mut rows = vec![head];
    for t in &p.threads {
        let mut tid = t.tid.to_string();
        if t.is_main(p) {
            tid.push('*');
        }
        let end = match end_ns(p, t) {
            Some(e) => ms(Some(e)),
            None if t.alive => "running".into(),
            None => "?".into(),
        };
        let exit = if t.alive && t.exit_kind == EXIT_UNKNOWN { "-" } else { exit_kind_name(t.exit_kind) };
        let mut row = vec![
            tid,
            t.name.clone().unwrap_or_else(|| "-".into()),
            start_routine(p, t).unwrap_or_else(|| "-".into()),
            t.creator_tid.map_or("-".into(), |c| c.to_string()),
            format!("{} → {end}", ms(Some(start_ns(p, t)))),
            exit.to_owned(),
        ];
        let observed =
            (0..N_STATES).filter(|&s| s != STATE_EXITED).fold(0u64, |a, s| a.saturating_add(t.state_ticks[s as usize]));
        for &s in &shown {
            let ticks = t.state_ticks[s as usize];
            row.push(if observed == 0 { "-".into() } else { format!("{:.1}", ticks as f64 * 100.0 / observed as f64) });
        }
        if split {
            match t.run_split_pct(p.tsc_hz) {
                Some((cpu, off, runq)) => row.extend([cpu, off, runq].map(|v| format!("{v:.1}"))),
                None => row.extend(["-", "-", "-"].map(String::from)),
            }
        }
        let wait = t.waits.iter().fold(0u64, |a, w| a.saturating_add(w.wait_ticks));
        row.push(ms(p.ticks_to_ns(wait)));
        rows.push(row);
    }
    let mut right = vec![true, false, false, true, false, false];
    right.extend(shown.iter().map(|_| true));
    right.extend([split; 3].iter().filter(|&&s| s));
    right.push(true);
    out.push_str(&columns(&rows, &right, "  "));
    out.push_str(
        "\n*: main thread; lifetime: ms since the process started (running: the thread still runs; ?: it ended \
         unseen); states: % of the thread's observed time; wait: time blocked in thread-library calls\n",
    );
    if split {
        out.push_str(
            "RUN (outside thread-library calls) = CPU% (on a CPU) + OFFCPU% (I/O, sleep, waits inside \
             libraries) + RUNQ% (waiting for a CPU), from the kernel's schedstat\n",
        );
    }
    push_warnings(&mut out, p);
    out
}

/// `thread 1236  name: compress  start: compress_thread  first: worker`, or
/// `thread 1234 (main)`.
pub fn thread_heading(p: &Profile, t: &ThreadProfile) -> String {
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
#[path = "report_opts_tests.rs"]
mod opts_tests;

/// The line saying whether the times are compensated for the instrumentation (D21), and by
/// how much per timed call; `None` for a profile without a calibration.
pub fn compensation_line(p: &Profile) -> Option<String> {
    let c = &p.compensation;
    if !c.calibrated() {
        return None;
    }
    let ns = |t: u64| t as f64 * 1e9 / (p.tsc_hz.max(1) as f64 * stint_layout::CALIB_SCALE as f64);
    let flat = p.threads.iter().all(|t| t.calltree.is_empty());
    let (pair, inner) = if flat { (c.pair_flat_ticks, c.inner_flat_ticks) } else { (c.pair_ticks, c.inner_ticks) };
    let mut line = if c.applied {
        format!(
            "times compensated: {:.1} ns per timed call subtracted from its callers, {:.1} ns from the function (--raw: as measured)",
            ns(pair),
            ns(inner)
        )
    } else {
        format!("times raw: as measured, each timed call adding {:.1} ns to its callers", ns(pair))
    };
    if c.applied && flat {
        line.push_str("; no call paths: callees' costs stay in their callers");
    }
    // Only where some timed function took the wrappers' fast path (wrapcomp).
    let events: u64 = p.threads.iter().flat_map(|t| &t.calltree).map(|n| n.wrap_events).fold(0, u64::saturating_add);
    if c.applied && c.wrap_event_ticks > 0 && events > 0 {
        let _ = write!(
            line,
            "; {:.1} ns per mutex wrapper event ({events}) from the timed functions around it",
            ns(c.wrap_event_ticks)
        );
    }
    // Where some timed function went through the wrappers' full path (slowwrap).
    let slow: u64 = p.threads.iter().flat_map(|t| &t.calltree).map(|n| n.slow_wrap_events).fold(0, u64::saturating_add);
    if c.applied && c.wrap_slow_ticks > 0 && slow > 0 {
        let _ = write!(
            line,
            "; {:.1} ns per other wrapper event ({slow}: waits, contended locks, …) from the timed functions around it",
            ns(c.wrap_slow_ticks)
        );
    }
    if let Some(k) = c.capped.filter(|_| c.applied) {
        let name = p.points.get(k.point as usize).map_or("?", |m| m.function.as_str());
        let _ = write!(
            line,
            "; calibration capped at {name}'s own {:.1} ns per call (x{:.2})",
            ns(k.per_call_ticks),
            k.factor_ppm as f64 / 1e6
        );
    }
    if c.clamped > 0 {
        let _ = write!(line, "; {} times clamped at 0", c.clamped);
    }
    Some(line)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::{load, parse, parse_with, Observer};
    use crate::synthetic::{
        patch_column, patch_header, put_object, put_transition, put_wait, synthetic_meta, synthetic_meta_points,
        write_synthetic, SYNTHETIC_MONOTONIC_NS, SYNTHETIC_START_TSC,
    };
    use serde_json::{json, Value};
    use stint_layout::{
        SyncObject, Transition, WaitEntry, COLUMN_EMPTY, EXIT_CANCELED, EXIT_RETURNED, FLAG_FORK_CHILD, OBJ_BARRIER,
        OBJ_CONDVAR, OBJ_SEMAPHORE, OBJ_THREAD, RING_CAP, STATE_BLOCKED_CONDVAR, STATE_BLOCKED_JOIN,
        STATE_BLOCKED_MUTEX,
    };

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
        // Below every function: no function contains it.
        patch_column(&mut b, 3, |c| c.start_routine = 0x1000);
        patch_column(&mut b, 4, |c| c.state = COLUMN_EMPTY);
        b
    }

    fn sample() -> Profile {
        // One file per call: tests run in parallel, and one removing the file another is
        // loading failed `table` once.
        static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let path = std::env::temp_dir().join(format!("stint-report-test-{}-{n}.stint", std::process::id()));
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
                {"tid": 1237, "name": null, "start_routine": "0x1000", "first_function": null, "main": false,
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
        // The thread record of threads the wrappers never saw: registered 1, 2, 3, 4 µs after
        // the start, nothing else known, no time in any state (no calibration: null).
        for (i, t) in expected["threads"].as_array_mut().unwrap().iter_mut().enumerate() {
            let states: serde_json::Map<String, Value> =
                (0..N_STATES).map(|s| (state_label(s).to_owned(), json!(null))).collect();
            for (k, v) in [
                ("running", json!(false)),
                ("creator_tid", json!(null)),
                ("start_ns", json!((i + 1) * 1000)),
                ("end_ns", json!(null)),
                ("exit", json!("unknown")),
                ("exit_value", json!(null)),
                ("state", json!("RUN")),
                ("states", Value::Object(states)),
                ("waits", json!([])),
                ("wrap_skipped", json!(0)),
            ] {
                t[k] = v;
            }
        }
        expected["tsc_hz"] = json!(0);
        expected["objects"] = json!([]);
        expected["objects_lost"] = json!(0);
        expected["warnings"] = json!([]);
        // The process keys (D22): a file without a process record (argv empty, no lineage),
        // whose process is gone.
        for (k, v) in [
            ("parent_pid", json!(1)),
            ("parent_profile", json!(null)),
            ("exec_from", json!(null)),
            ("argv", json!([])),
            ("argv_truncated", json!(false)),
            ("started", json!(sample().start_realtime_ns)),
            ("ended", json!({"how": "gone", "exit_status": null, "signal": null, "at": null})),
        ] {
            expected[k] = v;
        }
        let mut got = to_json(&sample());
        // Whether pid 1234 runs on this machine is not the test's business.
        for t in got["threads"].as_array_mut().unwrap() {
            t["running"] = json!(false);
        }
        assert_eq!(got, expected);
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
        insta::assert_snapshot!(to_table_with(
            &parse(&b).unwrap(),
            &TableOptions { top: Some(1), ..Default::default() }
        ));
    }

    #[test]
    fn table_of_an_empty_profile() {
        let p = parse(&write_synthetic(&meta(), &[])).unwrap();
        assert_eq!(
            to_table(&p),
            "program pigz  pid 4242  threads 0  (skipped reentrant events: 0)\n\ntotal: 0 threads, 0 calls\n"
        );
    }

    const T0: u64 = SYNTHETIC_START_TSC;
    /// 2 GHz: 2 ticks a nanosecond.
    const HZ: u64 = 2_000_000_000;
    const MS: u64 = 2_000_000;

    /// A producer and a consumer sharing a mutex and a condvar, joined by main; the consumer
    /// is canceled, main ended unseen (the process exited). Objects of every kind, one that
    /// nobody waited on, one first used outside every function, one with no caller recorded.
    fn locks_file() -> Vec<u8> {
        let meta = synthetic_meta_points(
            "pc",
            &[
                ("entry", "main", "0x1139", 0x50),
                ("entry", "producer", "0x1189", 0x37),
                ("entry", "consumer", "0x11c0", 0x40),
                ("entry", "leaf", "0x1200", 0x20),
                ("wrap", "pthread_mutex_lock", "0x1030", 0),
                ("wrap", "pthread_cond_wait", "0x1040", 0),
                ("wrap", "pthread_join", "0x1050", 0),
            ],
        );
        let mut b = write_synthetic(
            &meta,
            &[
                (1234, vec![(0, 1), (6, 2)]),
                (1235, vec![(1, 1), (4, 120), (3, 500)]),
                (1236, vec![(2, 1), (4, 80), (5, 40)]),
            ],
        );
        patch_header(&mut b, |h| h.tsc_hz = HZ);
        let objects = [
            (OBJ_MUTEX, 0x5555_5555_a040, 0x11a0, 1235),
            (OBJ_CONDVAR, 0x5555_5555_a080, 0x11d3, 1236),
            (OBJ_THREAD, 0x7f00_00a0_0640, 0x1160, 1234),
            (OBJ_THREAD, 0x7f00_0020_0640, 0x1170, 1234),
            (OBJ_SEMAPHORE, 0x5555_5555_a0c0, 0x9000, 1235),
            (OBJ_RWLOCK, 0x5555_5555_a100, 0, 1236),
            (OBJ_BARRIER, 0x5555_5555_a140, 0x1205, 1236),
        ];
        for (i, &(kind, address, first_pc, first_tid)) in objects.iter().enumerate() {
            put_object(&mut b, i as u32, &SyncObject { address, first_pc, kind, first_tid, ..Default::default() });
        }
        let wait = |object: u32, kind, count, contended, wait_ms_x2: u64, hold_ms_x2: u64| WaitEntry {
            object: object + 1,
            kind,
            count,
            contended,
            wait_ticks: wait_ms_x2 * MS / 2,
            hold_ticks: hold_ms_x2 * MS / 2,
            ..Default::default()
        };
        // main joined both threads
        put_wait(&mut b, 0, 7, &wait(2, OBJ_THREAD, 1, 1, 80, 0));
        put_wait(&mut b, 0, 9, &WaitEntry { wait_ticks: 2000, ..wait(3, OBJ_THREAD, 1, 0, 0, 0) });
        // producer: the mutex, 12.5 ms waiting, 3.25 ms holding
        put_wait(&mut b, 1, 0, &wait(0, OBJ_MUTEX, 120, 30, 25, 6));
        put_wait(&mut b, 1, 1, &WaitEntry { hold_ticks: 6_500_000, ..wait(0, OBJ_MUTEX, 0, 0, 0, 0) });
        // consumer: the mutex and the condvar, and a barrier it passed without waiting
        put_wait(&mut b, 2, 3, &wait(0, OBJ_MUTEX, 80, 10, 4, 2));
        put_wait(&mut b, 2, 4, &wait(1, OBJ_CONDVAR, 40, 40, 60, 0));
        put_wait(&mut b, 2, 5, &wait(6, OBJ_BARRIER, 1, 0, 0, 0));
        patch_column(&mut b, 0, |c| {
            c.registered_monotonic_ns = SYNTHETIC_MONOTONIC_NS + 50_000;
            c.state_ticks[STATE_RUN as usize] = 20 * MS;
            c.state_ticks[STATE_BLOCKED_JOIN as usize] = 40 * MS + 2000;
            c.thread_state = STATE_RUN;
            c.state_since = T0 + 100 * MS;
            c.last_tsc = T0 + 100 * MS + 10_000;
        });
        patch_column(&mut b, 1, |c| {
            c.name[..8].copy_from_slice(b"producer");
            c.start_routine = 0x1189;
            c.creator_tid = 1234;
            c.registered_monotonic_ns = SYNTHETIC_MONOTONIC_NS + 1_000_000;
            c.end_monotonic_ns = SYNTHETIC_MONOTONIC_NS + 45_000_000;
            c.exit_kind = EXIT_RETURNED;
            c.exit_value = 0;
            c.thread_state = STATE_EXITED;
            c.state_since = T0 + 88 * MS;
            c.state_ticks[STATE_RUN as usize] = 31 * MS;
            c.state_ticks[STATE_BLOCKED_MUTEX as usize] = 12 * MS + MS / 2;
            c.last_tsc = T0 + 88 * MS;
            c.wrap_skipped = 2;
        });
        patch_column(&mut b, 2, |c| {
            c.name[..8].copy_from_slice(b"consumer");
            c.start_routine = 0x11c0;
            c.creator_tid = 1234;
            c.registered_monotonic_ns = SYNTHETIC_MONOTONIC_NS + 1_200_000;
            c.end_monotonic_ns = SYNTHETIC_MONOTONIC_NS + 50_000_000;
            c.exit_kind = EXIT_CANCELED;
            c.exit_value = u64::MAX;
            c.thread_state = STATE_EXITED;
            c.state_ticks[STATE_RUN as usize] = 4 * MS;
            c.state_ticks[STATE_BLOCKED_MUTEX as usize] = 2 * MS;
            c.state_ticks[STATE_BLOCKED_CONDVAR as usize] = 30 * MS;
            c.last_tsc = T0 + 99 * MS;
        });
        let transitions = [
            (T0 + 3 * MS, STATE_BLOCKED_MUTEX, 0),
            (T0 + 4 * MS, STATE_RUN, u32::MAX),
            (T0 + 5 * MS, STATE_BLOCKED_CONDVAR, 1),
            (T0 + 99 * MS, STATE_EXITED, u32::MAX),
        ];
        for (n, &(tsc, state, object)) in transitions.iter().enumerate() {
            put_transition(&mut b, 2, n as u64, &Transition { tsc, state, object });
        }
        b
    }

    fn locks() -> Profile {
        parse_with(&locks_file(), &Observer::ENDED).unwrap()
    }

    #[test]
    fn lock_table() {
        insta::assert_snapshot!(to_lock_table(&locks()));
    }

    #[test]
    fn thread_table() {
        insta::assert_snapshot!(to_thread_table(&locks()));
    }

    #[test]
    fn json_with_locks() {
        insta::assert_json_snapshot!(crate::json::profile_json(&locks()));
    }

    #[test]
    fn json_fields_of_threads_and_objects() {
        let v = to_json(&locks());
        let t = &v["threads"];
        // Main ended unseen: no end, exit unknown; 20 ms running plus the open interval up
        // to its last event (10000 ticks).
        assert_eq!(
            (&t[0]["end_ns"], &t[0]["exit"], &t[0]["exit_value"]),
            (&json!(null), &json!("unknown"), &json!(null))
        );
        assert_eq!(t[0]["states"]["RUN"], json!(20_000_000 + 5000));
        assert_eq!(t[0]["states"]["BLOCKED_JOIN"], json!(40_001_000));
        assert_eq!(t[0]["start_ns"], json!(50_000));
        // Waits, most wait first; the two producer entries for the mutex are merged.
        assert_eq!(
            t[0]["waits"],
            json!([
                {"object": "0x7f0000a00640", "kind": "thread", "wait_ns": 40_000_000, "count": 1, "contended": 1, "hold_ns": 0},
                {"object": "0x7f0000200640", "kind": "thread", "wait_ns": 1000, "count": 1, "contended": 0, "hold_ns": 0},
            ])
        );
        assert_eq!(
            t[1]["waits"],
            json!([{"object": "0x55555555a040", "kind": "mutex", "wait_ns": 12_500_000, "count": 120,
                    "contended": 30, "hold_ns": 6_250_000}])
        );
        assert_eq!(
            (&t[1]["exit"], &t[1]["exit_value"], &t[1]["end_ns"]),
            (&json!("returned"), &json!(0), &json!(45_000_000))
        );
        assert_eq!(
            (&t[1]["creator_tid"], &t[1]["start_routine"], &t[1]["wrap_skipped"]),
            (&json!(1234), &json!("producer"), &json!(2))
        );
        assert_eq!((&t[2]["exit"], &t[2]["exit_value"]), (&json!("canceled"), &json!(u64::MAX)));
        assert_eq!(t[2]["state"], json!("EXITED"));
        assert_eq!(
            t[2]["transitions"],
            json!([
                {"t_ns": 3_000_000, "state": "BLOCKED_MUTEX", "object": "0x55555555a040"},
                {"t_ns": 4_000_000, "state": "RUN", "object": null},
                {"t_ns": 5_000_000, "state": "BLOCKED_CONDVAR", "object": "0x55555555a080"},
                {"t_ns": 99_000_000, "state": "EXITED", "object": null},
            ])
        );
        // No ring entries: no transitions field.
        assert!(t[0].get("transitions").is_none());
        let o = &v["objects"];
        assert_eq!(o.as_array().unwrap().len(), 7);
        assert_eq!(
            o[0],
            json!({"address": "0x55555555a040", "kind": "mutex", "first_used_in": "producer", "first_tid": 1235})
        );
        assert_eq!(o[4]["first_used_in"], json!("0x9000"));
        assert_eq!(o[5]["first_used_in"], json!(null));
        assert_eq!(v["objects_lost"], json!(0));
    }

    #[test]
    fn ring_keeps_the_last_transitions() {
        let mut b = locks_file();
        for n in 0..300u64 {
            put_transition(&mut b, 0, n, &Transition { tsc: T0 + 2 * n, state: (n % 2) as u32, object: u32::MAX });
        }
        let v = to_json(&parse_with(&b, &Observer::ENDED).unwrap());
        let tr = v["threads"][0]["transitions"].as_array().unwrap();
        assert_eq!(tr.len(), RING_CAP as usize);
        assert_eq!(tr[0], json!({"t_ns": 300 - RING_CAP as u64, "state": "RUN", "object": null}));
        assert_eq!(tr[RING_CAP as usize - 1], json!({"t_ns": 299, "state": "BLOCKED_MUTEX", "object": null}));
    }

    #[test]
    fn running_threads_and_live_processes() {
        // Main and the consumer still run (the consumer's record says canceled: the
        // thread table believes the record).
        let obs = Observer {
            thread_alive: |_, tid| tid == 1234,
            process_alive: |_| true,
            now_tsc: || SYNTHETIC_START_TSC + 102 * MS,
            thread_cpu_ns: |_, _| None,
            thread_sched_ns: |_, _| None,
        };
        let p = parse_with(&locks_file(), &obs).unwrap();
        assert_eq!(to_json(&p)["threads"][0]["running"], json!(true));
        let t = to_thread_table(&p);
        assert!(t.starts_with("program pc  pid 1234  threads 3  (process running)\n"), "{t}");
        let main = t.lines().find(|l| l.trim_start().starts_with("1234*")).unwrap();
        assert!(main.contains("0.050 → running  -  "), "{main}");
        // 20 ms + 2 ms open of RUN, 40 ms of JOIN
        assert_eq!(to_json(&p)["threads"][0]["states"]["RUN"], json!(22_000_000));
    }

    #[test]
    fn tables_without_locks_or_calibration() {
        let p = parse_with(&write_synthetic(&meta(), &[(7, vec![(0, 1)])]), &Observer::ENDED).unwrap();
        assert_eq!(
            to_lock_table(&p).lines().take(3).collect::<Vec<_>>(),
            [
                "program pigz  pid 7  objects 0  threads 1",
                "",
                "(no sync objects: the lock_wait metric was off, or no wrapped thread-library call ran)"
            ]
        );
        let t = to_thread_table(&p);
        assert!(t.contains("\n   7*  -     -                    -  0.001 → ?    unknown     -        -\n"), "{t}");
        let mut b = locks_file();
        patch_header(&mut b, |h| {
            h.tsc_hz = 0;
            h.objects_lost = 3;
        });
        let p = parse_with(&b, &Observer::ENDED).unwrap();
        let l = to_lock_table(&p);
        assert!(
            l.starts_with("program pc  pid 1234  objects 7  threads 3  (objects not recorded, table full: 3)\n"),
            "{l}"
        );
        assert!(l.contains("  1235 producer    120         30        -        -\n"), "{l}");
        // Shares of states need no calibration.
        assert!(to_thread_table(&p).contains("66.7"), "{}", to_thread_table(&p));
        assert_eq!(to_json(&p)["threads"][0]["states"]["RUN"], json!(null));
    }

    #[test]
    fn warnings_are_printed_under_every_table() {
        let mut b = locks_file();
        put_wait(&mut b, 1, 9, &WaitEntry { object: 60, kind: OBJ_MUTEX, count: 1, ..Default::default() });
        let p = parse_with(&b, &Observer::ENDED).unwrap();
        let w = "warning: thread 1235: wait entry 9 names sync object 59, which the file does not record (7 objects, table of 64); skipped\n";
        for t in [to_table(&p), to_lock_table(&p), to_thread_table(&p)] {
            assert!(t.ends_with(w), "{t}");
        }
        assert_eq!(to_json(&p)["warnings"], json!([w.trim_start_matches("warning: ").trim_end()]));
    }

    #[test]
    fn long_names_come_last_and_keep_the_figures_aligned() {
        let long = "std::vector<int>::push_back(int const&)";
        let longer = "x".repeat(60);
        let meta = synthetic_meta("p", &[(long, "0x10"), (&longer, "0x20")]);
        let b = write_synthetic(&meta, &[(1, vec![(0, 3), (1, 2)])]);
        let t = to_table(&parse(&b).unwrap());
        assert!(t.contains(&format!("      3  0x10     {long}\n")), "{t}");
        assert!(t.contains(&format!("      2  0x20     {longer}\n")), "{t}");
    }
}
