//! The `stint-profile/1` JSON contract as types: what `stint report --format json` prints,
//! and what readers of that output (scripts, tests, a later `diff`) deserialise.
//!
//! The contract is stable: later versions add fields, never remove or change one. The field
//! order of these structs is the order of the keys in the output, so they change only by
//! appending. A value that can be unknown is an `Option` and prints as `null`; the one key
//! that is left out rather than `null` is a thread's `transitions` (absent when the thread
//! has no state-transition ring entries), and, likewise, `calltree` (no call paths) and
//! `calltree_lost` (0). Deserialising accepts documents of older versions:
//! a missing `Option` field reads as `None`, a missing `transitions` as empty.
//!
//! [`profile_json`] builds the document from the typed model ([`Profile`]); naming
//! (functions by the meta, addresses in the input ELF by the function that contains them)
//! is the report's ([`crate::report`]).
//!
//! ```json
//! {"schema": "stint-profile/1", "program": "pigz", "pid": 1234, "ppid": 1, "fork_child": false,
//!  "threads": [{"tid": 1235, "name": null, "start_routine": null, "first_function": "worker",
//!               "main": false, …,
//!               "functions": [{"name": "mid", "address": "0x1189", "calls": 1000,
//!                              "cpu_ns": null, "wall_ns": null}], …}],
//!  "skipped_reentrant": 0, "lost_threads": 0, "tsc_hz": 0, "objects": [], "objects_lost": 0,
//!  "warnings": []}
//! ```

use std::fmt;

use serde::de::{MapAccess, Visitor};
use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use stint_layout::{exit_kind_name, EXIT_UNKNOWN, N_STATES};

use crate::profile::{ObjectProfile, Profile, ThreadProfile};
use crate::report::{
    end_ns, first_function, first_used_in, functions, kind_name, longest_wait_in, object_address, object_name,
    object_threads, point_name, start_ns, start_routine, state_label, waits_by_time,
};

/// `schema` of the document.
pub const SCHEMA: &str = "stint-profile/1";

/// The whole document: the process, its threads, its sync objects.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProfileJson {
    /// Always [`SCHEMA`].
    pub schema: String,
    /// The program's name as the rewriter recorded it.
    pub program: String,
    pub pid: u32,
    /// The parent at the start (for a fork child: the rewritten program it was forked from).
    pub ppid: u32,
    /// The process is a fork child of a rewritten program, with a profile of its own.
    pub fork_child: bool,
    /// Threads in column (registration) order.
    pub threads: Vec<ThreadJson>,
    /// Events skipped because the thread was already inside the runtime.
    pub skipped_reentrant: u64,
    /// Threads that found no free column (not measured).
    pub lost_threads: u64,
    /// TSC ticks per second the runtime calibrated; 0 if none (times are then `null`).
    pub tsc_hz: u64,
    /// Sync objects in table order.
    pub objects: Vec<ObjectJson>,
    /// Sync objects not recorded because the table was full.
    pub objects_lost: u64,
    /// One line per thing skipped while reading the file.
    pub warnings: Vec<String>,
    /// The process image: its parent, the image it replaced, its arguments, start and end
    /// (D22); keys at the top level.
    #[serde(flatten)]
    pub process: ProcessJson,
    /// What one instrumented event costs and whether the times here had it subtracted
    /// (D21); absent when the runtime did not calibrate (older runtimes, merged documents).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compensation: Option<CompensationJson>,
}

/// The `compensation` key: the calibrated cost per event, in picoseconds, and whether `cpu_ns`,
/// `wall_ns` and the call tree's figures are compensated (`false`: `stint report --raw`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CompensationJson {
    pub applied: bool,
    /// A timed call (entry and exit) as its caller pays it, with call paths / without.
    pub timed_call_ps: u64,
    pub timed_call_flat_ps: u64,
    /// The part of it inside the called function's own time, with / without call paths.
    pub inside_ps: u64,
    pub inside_flat_ps: u64,
    /// A counted, untimed call (not subtracted).
    pub counted_call_ps: u64,
    /// `timed_call_ps` / `inside_ps` of a tiny function whose entry trampoline runs its exit
    /// (tactic `entry+exit`), and of a call into an import timed at its call site; 0 when the
    /// runtime did not measure them (then the figures above stand in).
    #[serde(default)]
    pub timed_call_entry_exit_ps: u64,
    #[serde(default)]
    pub inside_entry_exit_ps: u64,
    #[serde(default)]
    pub timed_call_import_ps: u64,
    #[serde(default)]
    pub inside_import_ps: u64,
    /// An untimed call of a sampled function (no clock read) as its caller pays it, and the
    /// same for the `entry+exit` tactic; absent when the runtime did not measure them.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub untimed_call_ps: u64,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub untimed_call_entry_exit_ps: u64,
    /// `inside_ps` of a sampled function's timed call (drawn among untimed ones).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub inside_sampled_ps: u64,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub inside_sampled_entry_exit_ps: u64,
    /// One thread-library wrapper event (an uncontended mutex lock or unlock through the
    /// wrapper's fast path), subtracted from the timed functions it ran in and their callers;
    /// absent when the runtime did not measure it.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub wrapper_event_ps: u64,
    /// One wrapper event off the fast path (a contended or first lock, half a condition
    /// wait, an rwlock, semaphore, join, create, … through the full path), subtracted the
    /// same way (slowwrap); `wrapper_slow_events` of them were counted in timed functions.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub wrapper_slow_event_ps: u64,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub wrapper_slow_events: u64,
    /// Times that went below zero and were clamped to 0.
    pub clamped: u64,
    /// Each calibration run of the image, start-up first (the runtime calibrates again as the
    /// program ends); the figures above are, per kind of event, the least of them. Absent from
    /// runtimes before profile version 8 and in merged documents.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub calibrations: Vec<CalibrationJson>,
    /// Present when the calibrated figures were above what a leaf function's own calls show and
    /// were scaled down to it before being subtracted (the figures above are the scaled ones;
    /// `calibrations` as measured).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capped: Option<CappedJson>,
}

/// One calibration run: when it began and what it measured, ps.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CalibrationJson {
    /// Microseconds after the image's start (0 for the start-up run).
    pub at_us: u64,
    pub timed_call_ps: u64,
    pub inside_ps: u64,
    pub timed_call_flat_ps: u64,
    pub inside_flat_ps: u64,
    pub timed_call_entry_exit_ps: u64,
    pub timed_call_import_ps: u64,
}

/// `compensation.capped`: the leaf whose calls bound the calibration.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CappedJson {
    /// The leaf function.
    pub function: String,
    /// Its raw time per call, ps.
    pub per_call_ps: u64,
    /// What every calibrated figure was multiplied by, in millionths (below 1,000,000).
    pub factor_ppm: u64,
}

/// A thread's RUN time split by the scheduler's figures (issue 12): ns, and % of the thread's
/// observed time (every state but `EXITED`), as `report --by thread` shows them.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RunSplitJson {
    /// On a CPU.
    pub on_cpu_ns: Option<u64>,
    /// Neither on a CPU nor in a wrapped thread-library call: I/O, sleep, waits inside
    /// libraries the runtime does not wrap.
    pub off_cpu_ns: Option<u64>,
    /// Runnable, waiting for a CPU.
    pub run_queue_ns: Option<u64>,
    pub cpu_pct: f64,
    pub offcpu_pct: f64,
    pub runq_pct: f64,
}

/// The shares are finite (never NaN: they exist only for a thread observed for some time), so
/// `==` is an equivalence and the document stays `Eq`.
impl Eq for RunSplitJson {}

/// The process keys of the document (D22). Absent in documents of older versions (read as
/// their defaults).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessJson {
    /// The parent process's pid at the start (the same as `ppid`).
    #[serde(default)]
    pub parent_pid: u32,
    /// The profile of the process this one was forked from, when the runtime knew it.
    #[serde(default)]
    pub parent_profile: Option<String>,
    /// The profile of the image this one replaced by `exec` in the same process.
    #[serde(default)]
    pub exec_from: Option<String>,
    /// The arguments of the image (the first ones when `argv_truncated`).
    #[serde(default)]
    pub argv: Vec<String>,
    #[serde(default)]
    pub argv_truncated: bool,
    /// CLOCK_REALTIME at the image's start, ns since the epoch.
    #[serde(default)]
    pub started: u64,
    /// How the image ended; `null` while it runs.
    #[serde(default)]
    pub ended: Option<EndedJson>,
}

/// How an image ended.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct EndedJson {
    /// `exec` (replaced by another image), `exit`, `signal`, or `gone` (the process is gone
    /// and nothing recorded its end: killed, or returned from `main` with no recording
    /// parent, D22).
    pub how: String,
    /// The exit status as the parent saw it (0–255), when `how` is `exit`.
    #[serde(default)]
    pub exit_status: Option<u32>,
    /// The signal number, when `how` is `signal`.
    #[serde(default)]
    pub signal: Option<u32>,
    /// CLOCK_REALTIME of the end, ns since the epoch, when recorded.
    pub at: Option<u64>,
}

impl EndedJson {
    /// How a report says it: `exit 3`, `signal 9 (SIGKILL)`, `exec`, or for a process that is
    /// gone with no end recorded `unrecorded (killed, or returned from main unseen)`: the
    /// image records `exit`/`_exit`/`_Exit` calls itself, but a return from `main` and a
    /// signal are seen only by a parent that records them (a rewritten program's `wait*`,
    /// `stint run`).
    pub fn label(&self) -> String {
        match (self.how.as_str(), self.exit_status, self.signal) {
            ("exit", Some(s), _) => format!("exit {s}"),
            ("signal", _, Some(n)) => match signal_name(n) {
                Some(name) => format!("signal {n} ({name})"),
                None => format!("signal {n}"),
            },
            ("gone", _, _) => "unrecorded (killed, or returned from main unseen)".to_owned(),
            (how, _, _) => how.to_owned(),
        }
    }
}

/// The name of Linux signal `n` (x86-64 numbering), if it is a standard one.
pub fn signal_name(n: u32) -> Option<&'static str> {
    const NAMES: [&str; 31] = [
        "SIGHUP",
        "SIGINT",
        "SIGQUIT",
        "SIGILL",
        "SIGTRAP",
        "SIGABRT",
        "SIGBUS",
        "SIGFPE",
        "SIGKILL",
        "SIGUSR1",
        "SIGSEGV",
        "SIGUSR2",
        "SIGPIPE",
        "SIGALRM",
        "SIGTERM",
        "SIGSTKFLT",
        "SIGCHLD",
        "SIGCONT",
        "SIGSTOP",
        "SIGTSTP",
        "SIGTTIN",
        "SIGTTOU",
        "SIGURG",
        "SIGXCPU",
        "SIGXFSZ",
        "SIGVTALRM",
        "SIGPROF",
        "SIGWINCH",
        "SIGIO",
        "SIGPWR",
        "SIGSYS",
    ];
    NAMES.get((n as usize).checked_sub(1)?).copied()
}

/// The process keys of profile `p`.
pub fn process_json(p: &Profile) -> ProcessJson {
    let pr = &p.process;
    let ended = match pr.end.as_str() {
        "running" if p.alive => None,
        "running" => Some(EndedJson { how: "gone".into(), ..EndedJson::default() }),
        how => Some(EndedJson {
            how: how.to_owned(),
            exit_status: (how == "exit").then_some(pr.end_status),
            signal: (how == "signal").then_some(pr.end_status),
            at: (pr.end_realtime_ns != 0).then_some(pr.end_realtime_ns),
        }),
    };
    ProcessJson {
        parent_pid: p.ppid,
        parent_profile: pr.parent_profile.clone(),
        exec_from: pr.exec_from.clone(),
        argv: pr.argv.clone(),
        argv_truncated: pr.argv_truncated,
        started: p.start_realtime_ns,
        ended,
    }
}

/// One thread: its counters, the functions it called, its record, states and waits.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ThreadJson {
    /// Kernel tid.
    pub tid: u32,
    /// The thread's name (`pthread_setname_np`), if it had one.
    pub name: Option<String>,
    /// The function `pthread_create` was given (its name, else its address in hex).
    pub start_routine: Option<String>,
    /// The first instrumented function the thread entered.
    pub first_function: Option<String>,
    /// The process's main thread.
    pub main: bool,
    /// The CPU clock of the thread's timers (`perf-task-clock+tsc`, `rseq+tsc`, `clock_gettime`).
    pub clock_source: Option<String>,
    /// Timer events skipped in signal handlers that interrupted a timer routine.
    pub timer_skipped: u64,
    /// Exits without an open frame (entered while the timers were off).
    pub unmatched_exits: u64,
    /// Frames closed after an exception or `longjmp` passed them.
    pub abandoned_frames: u64,
    /// Activations deeper than the shadow stack (counted, not timed).
    pub shadow_overflow: u64,
    /// Times the shadow stack was resynchronised with the real one.
    pub resyncs: u64,
    /// The functions the thread called, most calls first.
    pub functions: Vec<FunctionJson>,
    /// The thread still ran when the file was read.
    pub running: bool,
    /// The thread that called `pthread_create`; `null` if unknown (the main thread).
    pub creator_tid: Option<u32>,
    /// ns from the process's start to the thread's registration.
    pub start_ns: u64,
    /// ns from the process's start to the thread's end; `null` if the runtime did not see it.
    pub end_ns: Option<u64>,
    /// `returned`, `pthread_exit`, `canceled` or `unknown`.
    pub exit: String,
    /// The value the thread ended with; `null` when `exit` is `unknown`.
    pub exit_value: Option<u64>,
    /// The state the thread is in (`RUN`, `BLOCKED_MUTEX`, …, `EXITED`).
    pub state: String,
    /// ns in each state, every state in layout order.
    pub states: StateTimes,
    /// Per sync object the thread used, most wait first.
    pub waits: Vec<WaitJson>,
    /// Wrapped calls not recorded (the thread was inside the runtime).
    pub wrap_skipped: u64,
    /// RUN split by the kernel's schedstat figures (on a CPU, off a CPU, waiting for a CPU);
    /// absent without them (a main thread that ended unseen, older runtimes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_split: Option<RunSplitJson>,
    /// The last state transitions (the ring); absent when there are none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub transitions: Vec<TransitionJson>,
    /// The thread's calling-context tree (D16), parents before children; absent when the
    /// profile has no call paths.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub calltree: Vec<CallNodeJson>,
    /// Entries not in the tree (it was full, or deeper than the shadow stack); absent when 0.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub calltree_lost: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// One node of a thread's calling-context tree: a function reached through one call path.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CallNodeJson {
    /// Index of the parent node in `calltree`; `null` for a root.
    pub parent: Option<u32>,
    /// The function's name (as in `functions`).
    pub function: String,
    pub calls: u64,
    /// Inclusive and self times through this path, ns (`null` without a calibration).
    pub cpu_ns: Option<u64>,
    pub wall_ns: Option<u64>,
    pub self_cpu_ns: Option<u64>,
    pub self_wall_ns: Option<u64>,
}

/// Calls and inclusive times of one function on one thread.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FunctionJson {
    /// Name from the meta (`point N` for a point the meta does not name).
    pub name: String,
    /// The function's address in the input ELF, in hex.
    pub address: String,
    pub calls: u64,
    /// Inclusive CPU time in ns; `null` if the function is not timed or there is no
    /// calibration.
    pub cpu_ns: Option<u64>,
    /// Inclusive wall time in ns; `null` as `cpu_ns`.
    pub wall_ns: Option<u64>,
    /// The times include a call still running when the profile was read, counted up to
    /// then (absent when false).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub running: bool,
    /// The times are estimates: the function's calls were short and frequent, so the
    /// runtime timed one in N of them (`calls` stays exact); absent when every call was timed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sampled: Option<SampledJson>,
}

/// How a sampled function's times were estimated: its timed calls' time × calls / timed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SampledJson {
    /// Calls timed, of `calls` calls of the sampled points.
    pub timed: u64,
    pub calls: u64,
    /// Error bound of `cpu_ns` and `wall_ns`, ns: twice the estimate's standard error (≈ 95 %),
    /// from the variance of the timed calls.
    pub cpu_error_ns: Option<u64>,
    pub wall_error_ns: Option<u64>,
}

/// A thread's use of one sync object.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WaitJson {
    /// The object's run-time address in hex (`null` if the file does not record it).
    pub object: Option<String>,
    /// Its data symbol or the thread it is (see [`ObjectJson::name`]); absent if none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub object_name: Option<String>,
    /// `mutex`, `condvar`, `rwlock`, `semaphore`, `barrier`, `thread`, or `unknown`.
    pub kind: String,
    /// Time blocked in the calls, ns.
    pub wait_ns: Option<u64>,
    /// Calls that acquired or waited successfully.
    pub count: u64,
    /// Of those, the ones that found the object taken (blocked over 1 µs for other kinds).
    pub contended: u64,
    /// Time a mutex or rwlock was held, ns.
    pub hold_ns: Option<u64>,
    /// The longest single call's time blocked, ns, and the function that made that call
    /// (its name, else the return address in hex); absent when the runtime did not record it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub longest_wait_ns: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub longest_wait_in: Option<String>,
}

/// One entry of a thread's state-transition ring.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TransitionJson {
    /// ns since the process started.
    pub t_ns: Option<u64>,
    /// The state entered.
    pub state: String,
    /// The sync object it blocked on, in hex.
    pub object: Option<String>,
}

/// One sync object the wrappers saw.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObjectJson {
    /// Run-time address in hex.
    pub address: String,
    /// `mutex`, `condvar`, …
    pub kind: String,
    /// The function that first used it (its name, else the caller's address in hex).
    pub first_used_in: Option<String>,
    /// The thread that first used it.
    pub first_tid: u32,
    /// What it is: the data symbol it lies in (`big_lock`, `_PyRuntime+0x1a8`, from the
    /// program's symbols or debug info), or for a `thread` object the thread it is
    /// (`thread 1235 worker`); absent for heap objects and unknown threads.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// For a `thread` object: the tids of the threads it is (a join's target).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub threads: Vec<u32>,
}

/// ns per state, as a JSON object keyed by state name in layout order (`{"RUN": 20000000,
/// "BLOCKED_MUTEX": 0, …}`); `null` for a state without calibration.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StateTimes(pub Vec<(String, Option<u64>)>);

impl StateTimes {
    /// ns in state `name`, if the document has it.
    pub fn get(&self, name: &str) -> Option<Option<u64>> {
        self.0.iter().find(|(n, _)| n == name).map(|&(_, ns)| ns)
    }
}

impl Serialize for StateTimes {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(self.0.len()))?;
        for (name, ns) in &self.0 {
            m.serialize_entry(name, ns)?;
        }
        m.end()
    }
}

impl<'de> Deserialize<'de> for StateTimes {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct InOrder;
        impl<'de> Visitor<'de> for InOrder {
            type Value = StateTimes;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an object of ns per state")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut a: A) -> Result<StateTimes, A::Error> {
                let mut v = Vec::new();
                while let Some(entry) = a.next_entry()? {
                    v.push(entry);
                }
                Ok(StateTimes(v))
            }
        }
        d.deserialize_map(InOrder)
    }
}

/// The `stint-profile/1` document of a profile.
pub fn profile_json(p: &Profile) -> ProfileJson {
    ProfileJson {
        schema: SCHEMA.to_owned(),
        program: p.program.clone(),
        pid: p.pid,
        ppid: p.ppid,
        fork_child: p.fork_child(),
        threads: p.threads.iter().map(|t| thread_json(p, t)).collect(),
        skipped_reentrant: p.skipped_reentrant,
        lost_threads: p.lost_threads,
        tsc_hz: p.tsc_hz,
        objects: p.objects.iter().map(|o| object_json(p, o)).collect(),
        objects_lost: p.objects_lost,
        warnings: p.warnings.clone(),
        process: process_json(p),
        compensation: compensation_json(p),
    }
}

/// The `compensation` key of `p` (`None` without a calibration).
pub fn compensation_json(p: &Profile) -> Option<CompensationJson> {
    let c = &p.compensation;
    let ps = |t: u64| {
        if p.tsc_hz == 0 {
            0
        } else {
            (t as u128 * 1_000_000_000_000 / (p.tsc_hz as u128 * stint_layout::CALIB_SCALE as u128)) as u64
        }
    };
    c.calibrated().then(|| CompensationJson {
        applied: c.applied,
        timed_call_ps: ps(c.pair_ticks),
        timed_call_flat_ps: ps(c.pair_flat_ticks),
        inside_ps: ps(c.inner_ticks),
        inside_flat_ps: ps(c.inner_flat_ticks),
        counted_call_ps: ps(c.count_ticks),
        timed_call_entry_exit_ps: ps(c.pair_ee_ticks),
        inside_entry_exit_ps: ps(c.inner_ee_ticks),
        timed_call_import_ps: ps(c.pair_import_ticks),
        inside_import_ps: ps(c.inner_import_ticks),
        untimed_call_ps: ps(c.pair_untimed_ticks),
        untimed_call_entry_exit_ps: ps(c.pair_untimed_ee_ticks),
        inside_sampled_ps: ps(c.inner_sampled_ticks),
        inside_sampled_entry_exit_ps: ps(c.inner_sampled_ee_ticks),
        wrapper_event_ps: ps(c.wrap_event_ticks),
        wrapper_slow_event_ps: ps(c.wrap_slow_ticks),
        wrapper_slow_events: p
            .threads
            .iter()
            .flat_map(|t| &t.calltree)
            .map(|n| n.slow_wrap_events)
            .fold(0, u64::saturating_add),
        clamped: c.clamped,
        calibrations: c
            .runs
            .iter()
            .map(|r| CalibrationJson {
                at_us: (r.at_ticks as u128 * 1_000_000 / p.tsc_hz.max(1) as u128) as u64,
                timed_call_ps: ps(r.pair_ticks),
                inside_ps: ps(r.inner_ticks),
                timed_call_flat_ps: ps(r.pair_flat_ticks),
                inside_flat_ps: ps(r.inner_flat_ticks),
                timed_call_entry_exit_ps: ps(r.pair_ee_ticks),
                timed_call_import_ps: ps(r.pair_import_ticks),
            })
            .collect(),
        capped: c.capped.map(|k| CappedJson {
            function: p.points.get(k.point as usize).map(|m| m.function.clone()).unwrap_or_default(),
            per_call_ps: ps(k.per_call_ticks),
            factor_ppm: k.factor_ppm,
        }),
    })
}

fn run_split_json(p: &Profile, t: &ThreadProfile) -> Option<RunSplitJson> {
    let (cpu, off, runq) = t.run_split(p.tsc_hz)?;
    let (cpu_pct, offcpu_pct, runq_pct) = t.run_split_pct(p.tsc_hz)?;
    Some(RunSplitJson {
        on_cpu_ns: p.ticks_to_ns(cpu),
        off_cpu_ns: p.ticks_to_ns(off),
        run_queue_ns: p.ticks_to_ns(runq),
        cpu_pct,
        offcpu_pct,
        runq_pct,
    })
}

fn thread_json(p: &Profile, t: &ThreadProfile) -> ThreadJson {
    ThreadJson {
        tid: t.tid,
        name: t.name.clone(),
        start_routine: start_routine(p, t),
        first_function: first_function(p, t).map(str::to_owned),
        main: t.is_main(p),
        clock_source: t.clock_source.clone(),
        timer_skipped: t.timer_skipped,
        unmatched_exits: t.unmatched_exits,
        abandoned_frames: t.abandoned_frames,
        shadow_overflow: t.shadow_overflow,
        resyncs: t.resyncs,
        functions: functions(p, t)
            .into_iter()
            .map(|f| FunctionJson {
                name: f.name,
                address: f.address,
                calls: f.calls,
                cpu_ns: f.cpu_ns,
                wall_ns: f.wall_ns,
                running: f.running,
                sampled: f.sampled.map(|sc| SampledJson {
                    timed: sc.timed,
                    calls: sc.calls,
                    cpu_error_ns: sc.cpu_bound_ns,
                    wall_error_ns: sc.wall_bound_ns,
                }),
            })
            .collect(),
        running: t.alive,
        creator_tid: t.creator_tid,
        start_ns: start_ns(p, t),
        end_ns: end_ns(p, t),
        exit: exit_kind_name(t.exit_kind).to_owned(),
        run_split: run_split_json(p, t),
        exit_value: (t.exit_kind != EXIT_UNKNOWN).then_some(t.exit_value),
        state: state_label(t.thread_state).to_owned(),
        states: StateTimes(
            (0..N_STATES).map(|s| (state_label(s).to_owned(), p.ticks_to_ns(t.state_ticks[s as usize]))).collect(),
        ),
        waits: waits_by_time(t)
            .into_iter()
            .map(|w| WaitJson {
                object: object_address(p, w.object),
                object_name: p.object(w.object).and_then(|o| object_name(p, o)),
                kind: kind_name(w.kind).to_owned(),
                wait_ns: p.ticks_to_ns(w.wait_ticks),
                count: w.count,
                contended: w.contended,
                hold_ns: p.ticks_to_ns(w.hold_ticks),
                longest_wait_ns: (w.longest_pc != 0).then(|| p.ticks_to_ns(w.longest_ticks)).flatten(),
                longest_wait_in: longest_wait_in(p, w),
            })
            .collect(),
        wrap_skipped: t.wrap_skipped,
        transitions: t
            .transitions
            .iter()
            .map(|x| TransitionJson {
                t_ns: p.tsc_to_ns_since_start(x.tsc),
                state: state_label(x.state).to_owned(),
                object: x.object.and_then(|o| object_address(p, o)),
            })
            .collect(),
        calltree: t
            .calltree
            .iter()
            .zip(crate::calltree::self_ticks(&t.calltree))
            .map(|(n, (self_cpu, self_wall))| CallNodeJson {
                parent: n.parent,
                function: point_name(p, n.point),
                calls: n.calls,
                cpu_ns: p.ticks_to_ns(n.cpu_ticks),
                wall_ns: p.ticks_to_ns(n.wall_ticks),
                self_cpu_ns: p.ticks_to_ns(self_cpu),
                self_wall_ns: p.ticks_to_ns(self_wall),
            })
            .collect(),
        calltree_lost: t.calltree_lost,
    }
}

fn object_json(p: &Profile, o: &ObjectProfile) -> ObjectJson {
    ObjectJson {
        address: format!("{:#x}", o.address),
        kind: o.kind_name().to_owned(),
        first_used_in: first_used_in(p, o),
        first_tid: o.first_tid,
        name: object_name(p, o),
        threads: object_threads(p, o).iter().map(|t| t.tid).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::parse;
    use crate::synthetic::{synthetic_meta, write_synthetic};

    #[test]
    fn the_document_reads_back_as_written() {
        let meta = synthetic_meta("pigz", &[("main", "0x1139"), ("worker", "0x1189")]);
        let p = parse(&write_synthetic(&meta, &[(1234, vec![(0, 1), (1, 2)]), (1235, vec![(1, 7)])])).unwrap();
        let doc = profile_json(&p);
        let text = serde_json::to_string_pretty(&doc).unwrap();
        let back: ProfileJson = serde_json::from_str(&text).unwrap();
        assert_eq!(back, doc);
        assert_eq!(serde_json::to_string_pretty(&back).unwrap(), text);
        assert_eq!(back.threads[1].functions[0].calls, 7);
        assert_eq!(back.threads[0].states.0.len(), N_STATES as usize);
        assert_eq!(back.threads[0].states.get("RUN"), Some(None));
    }

    #[test]
    fn older_documents_read_with_defaults() {
        let old = r#"{"schema": "stint-profile/1", "program": "p", "pid": 1, "ppid": 0, "fork_child": false,
            "threads": [{"tid": 1, "main": true, "timer_skipped": 0, "unmatched_exits": 0,
                         "abandoned_frames": 0, "shadow_overflow": 0, "resyncs": 0, "functions": [],
                         "running": false, "start_ns": 0, "exit": "unknown", "state": "RUN",
                         "states": {}, "waits": [], "wrap_skipped": 0}],
            "skipped_reentrant": 0, "lost_threads": 0, "tsc_hz": 0, "objects": [], "objects_lost": 0,
            "warnings": []}"#;
        let doc: ProfileJson = serde_json::from_str(old).unwrap();
        assert_eq!((doc.threads[0].name.as_deref(), doc.threads[0].transitions.len()), (None, 0));
    }
}
