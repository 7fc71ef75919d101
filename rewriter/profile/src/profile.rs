//! Reading a profile file: the bytes a rewritten program's runtime wrote (DESIGN D9), turned
//! into a [`Profile`]: which process ran, which threads it had, and how often each thread
//! reached each instrumentation point.
//!
//! The file's layout comes only from `stint-layout` (`FileHeader::parse`, the `Pod` records,
//! `ColumnHeader::counter`, `column_range`, the `baseline_*_offset` functions); this module
//! restates no offset. What the file says about itself (program, metrics, points with
//! function names and addresses) is the meta JSON the rewriter wrote, `stint-meta/1`, read
//! into the same type the rewriter serialised (`stint_layout::meta::Meta`):
//!
//! ```json
//! {"schema":"stint-meta/1","program":"pigz","input":"/usr/bin/pigz",
//!  "metrics":[{"name":"calls","kind":"counter","slot":0}],
//!  "points":[{"id":0,"kind":"entry","function":"main","address":"0x1189"}]}
//! ```
//!
//! Fields this version does not know are ignored, so later rewriters may add some.
//!
//! # Live files
//! The file may belong to a running process that keeps writing it. [`load`] reads it once,
//! front to back, into memory and works on that copy. The runtime fills a column, then marks
//! it `COLUMN_LIVE`, then raises `n_columns` in the header; the header is read before the
//! columns, so every column below the `n_columns` we saw is complete. Columns in any other
//! state are skipped. The counters of threads still running are a snapshot.
//!
//! The sync-object table is read after the header, so a thread may name an object whose
//! index is at or past the `n_objects` we saw: such an object is taken if its entry is
//! complete (`kind` non-zero) in our copy, otherwise the thread's wait entry is skipped with
//! a warning ([`Profile::warnings`]).
//!
//! # Thread states
//! A column holds the TSC ticks of the thread's *closed* state intervals; the one it is in
//! now (`thread_state` since `state_since`) is added here ([`ThreadProfile::state_ticks`]):
//! up to now if the thread still runs ([`Observer`]: `/proc/<pid>/task/<tid>` exists and the
//! process is no zombie), else up to the thread's last wrapper event (`last_tsc`; no open
//! interval when there was none). An exited thread has no open interval.
//!
//! # Corrupt files
//! Nothing here panics on bad input: every problem is a [`ProfileError`] with a one-line
//! message (the caller prefixes the path), or, for a wait entry that names an object the file
//! does not have, a warning and the entry skipped. `FileHeader::parse` refuses header values
//! for which the column size (`n_points × n_counter_slots`) would overflow.
//!
//! # Synthetic files
//! [`crate::synthetic`] lays out files as the runtime would, for tests of everything that
//! reads profiles; its functions are re-exported here for their older callers.

use std::mem::size_of;
use std::path::Path;

use serde::{Deserialize, Serialize};
pub use stint_layout::meta::{MetricMeta, PointMeta, META_SCHEMA, POINT_ENTRY, POINT_WRAP};
use stint_layout::{
    baseline_counter_offset, baseline_state_offset, baseline_wait_offset, clock_source_name, metric_bit,
    object_kind_name, CctNode, ColumnHeader, Control, ControlFileStatus, FileHeader, FormatError, Metric, Pod,
    ProcessEnd, RequestOp, SyncObject, Transition, WaitEntry, COLUMN_LIVE, FLAG_ARGV_TRUNCATED, FLAG_FORK_CHILD,
    FLAG_LOAD_BIAS, METRIC_CPU_TIME, METRIC_WALL_TIME, N_STATES, RING_CAP, SHADOW_CAP, SLOT_CALLS, SLOT_CPU_TICKS,
    SLOT_WALL_TICKS, STATE_EXITED, THREAD_RULES_CAP, WAIT_CAP,
};
use thiserror::Error;

use crate::calltree::CallNode;

/// Name of the metric whose counters are the call counts.
pub const CALLS_METRIC: &str = Metric::Calls.name();
/// Names of the timer metrics (inclusive time in TSC ticks per point).
pub const CPU_METRIC: &str = Metric::CpuTime.name();
pub const WALL_METRIC: &str = Metric::WallTime.name();

/// Why a file could not be read as a profile. Messages name the problem only; the caller
/// prefixes the path.
#[derive(Debug, Error)]
pub enum ProfileError {
    /// The file could not be read at all.
    #[error("cannot read: {0}")]
    Read(std::io::Error),
    /// The header is missing, foreign, of another version or contradicts itself.
    #[error("{0}")]
    Format(FormatError),
    /// The self-description (meta JSON) is unusable.
    #[error("meta: {0}")]
    Meta(String),
    /// A column holds values that cannot be right.
    #[error("{0}")]
    Corrupt(String),
}

impl From<FormatError> for ProfileError {
    fn from(e: FormatError) -> Self {
        ProfileError::Format(e)
    }
}

/// Everything a profile file says.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Profile {
    /// Program name given to the rewriter.
    pub program: String,
    /// Path of the input the rewriter read, when the meta names it.
    pub input: Option<String>,
    /// The input's GNU build-id (hex), when the meta has it: finds its debug info
    /// ([`crate::symbols`]).
    #[serde(default)]
    pub build_id: Option<String>,
    /// The input's `.gnu_debuglink`, when the meta has it.
    #[serde(default)]
    pub debuglink: Option<stint_layout::meta::DebugLink>,
    /// Run-time minus input-ELF address of the program, when the runtime recorded it
    /// (`FLAG_LOAD_BIAS`): maps sync-object addresses to data symbols.
    #[serde(default)]
    pub load_bias: Option<u64>,
    pub pid: u32,
    pub ppid: u32,
    /// `FLAG_*` bits of the header.
    pub flags: u32,
    /// CLOCK_REALTIME at start, ns since the epoch.
    pub start_realtime_ns: u64,
    /// CLOCK_MONOTONIC at start, ns (compare with `ThreadProfile::registered_monotonic_ns`).
    pub start_monotonic_ns: u64,
    /// Events skipped because a signal handler interrupted the runtime (D7).
    pub skipped_reentrant: u64,
    /// Threads that could not get a column.
    pub lost_threads: u64,
    /// TSC ticks per second (0 if the runtime could not calibrate): converts timer ticks.
    pub tsc_hz: u64,
    /// TSC at start: the zero of every `*_tsc` value.
    pub start_tsc: u64,
    pub metrics: Vec<MetricMeta>,
    /// Indexed by point id.
    pub points: Vec<PointMeta>,
    /// In column order, which is registration order.
    pub threads: Vec<ThreadProfile>,
    /// The sync objects the program used, ascending by index in the file's table.
    pub objects: Vec<ObjectProfile>,
    /// Objects the runtime could not record because its table was full.
    pub objects_lost: u64,
    /// Whether the process was running when the file was read (see [`Observer`]).
    pub alive: bool,
    /// What was skipped while reading (one line each, e.g. a wait entry naming an object the
    /// file does not record).
    pub warnings: Vec<String>,
    /// The gate byte of each point as the file holds it now (`metric_bit`s on), indexed by
    /// point id.
    #[serde(default)]
    pub gates: Vec<u8>,
    /// The control page: thread focus, snapshots, what the control file did.
    #[serde(default)]
    pub control: ControlInfo,
    /// The process this image ran in: arguments, lineage and end (D22).
    #[serde(default)]
    pub process: ProcessInfo,
    /// What an instrumented event costs and whether the times were reduced by it (D21).
    #[serde(default)]
    pub compensation: Compensation,
}

/// Overhead compensation (D21): the runtime's calibration of what one instrumented event
/// costs (TSC ticks × [`stint_layout::CALIB_SCALE`], `FileHeader::calib`), and what
/// [`compensate`] did with it.
///
/// With call paths the subtraction is exact per node: a node's inclusive time loses
/// `calls × inner` (its own entries and exits) plus `pair` per call of its descendants (each
/// nested timed event, whole), and a function's flat time loses what its outermost nodes
/// lost. `inner` and `pair` are those of the point's kind of trampoline ([`Self::cost`]): a
/// function with separate entry and exit trampolines, a tiny one whose entry trampoline runs
/// its exit (`entry+exit`), a call into an import timed at its call site. Without call paths
/// a function's time loses its own share only (`calls × inner_flat_ticks`, the separate
/// trampolines' figure for every point): what its callees' events cost it stays in
/// (approximated, and said so in the report). Thread-library wrapper events on the mutex
/// fast path are counted at the innermost call-path node by the runtime and subtracted from
/// it and its callers (`wrap_event_ticks`, wrapcomp), and so are the events of the wrappers'
/// full path (`wrap_slow_ticks`, slowwrap: contended and first locks, condition waits,
/// rwlocks, semaphores, join, create). Counted-only calls (timers off), the fast path's
/// condition signals and `sem_post`, and the thunks' counting path are not subtracted:
/// nothing records which timed function made them (a counter per point and thread, not per
/// call path).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Compensation {
    /// A timed entry+exit with a call-path node, whole / inside the function's own span.
    pub pair_ticks: u64,
    pub inner_ticks: u64,
    /// The same without call paths.
    pub pair_flat_ticks: u64,
    pub inner_flat_ticks: u64,
    /// A counted, untimed entry.
    pub count_ticks: u64,
    /// `pair_ticks` / `inner_ticks` of a tiny function whose entry trampoline runs its exit
    /// (`entry+exit`), and of a call into an import timed at its call site; 0 from runtimes
    /// before the emitted calibration routine (then `pair_ticks`/`inner_ticks` stand in).
    #[serde(default)]
    pub pair_ee_ticks: u64,
    #[serde(default)]
    pub inner_ee_ticks: u64,
    #[serde(default)]
    pub pair_import_ticks: u64,
    #[serde(default)]
    pub inner_import_ticks: u64,
    /// An untimed call of a sampled point, whole (no clock read; the `entry+exit` tactic's
    /// apart); 0 from runtimes before sampling.
    #[serde(default)]
    pub pair_untimed_ticks: u64,
    #[serde(default)]
    pub pair_untimed_ee_ticks: u64,
    /// `inner_ticks` of a sampled point's timed call (drawn among untimed ones), and the same
    /// for `entry+exit`; 0 from runtimes before sampling.
    #[serde(default)]
    pub inner_sampled_ticks: u64,
    #[serde(default)]
    pub inner_sampled_ee_ticks: u64,
    /// One thread-library wrapper event on the fast path (an uncontended mutex lock or
    /// unlock, half the calibrated pair), subtracted per event counted at a call-path node
    /// from that node and its callers (wrapcomp); 0 from runtimes before it.
    #[serde(default)]
    pub wrap_event_ticks: u64,
    /// One wrapper event off the fast path (a contended lock, a condition wait's half, an
    /// rwlock, semaphore, join, … through the full path), subtracted per event counted at a
    /// call-path node like `wrap_event_ticks` (slowwrap); 0 from runtimes before it.
    #[serde(default)]
    pub wrap_slow_ticks: u64,
    /// Whether the times in this profile had the costs subtracted (`false`: raw figures).
    pub applied: bool,
    /// Times that would have gone below zero and were clamped to 0.
    pub clamped: u64,
    /// Each calibration run the runtime made, start-up first (`FileHeader::calib_runs`): the
    /// figures above are, per kind of event, the least of them. Empty from runtimes before
    /// version 8.
    #[serde(default)]
    pub runs: Vec<CalibrationRun>,
    /// Calibration runs made, also those beyond the ones kept in `runs`.
    #[serde(default)]
    pub run_count: u32,
    /// Set by [`compensate`] when the calibrated costs were above what a leaf function's own
    /// calls show (its raw time per call bounds the instrumentation's part inside it) and
    /// were scaled down to it.
    #[serde(default)]
    pub capped: Option<Capped>,
}

/// One calibration run (D21), TSC ticks × [`stint_layout::CALIB_SCALE`] like
/// [`Compensation`]'s figures.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CalibrationRun {
    /// When the run began, TSC ticks after the image's start (0 for the start-up run).
    pub at_ticks: u64,
    pub pair_ticks: u64,
    pub inner_ticks: u64,
    pub pair_flat_ticks: u64,
    pub inner_flat_ticks: u64,
    pub pair_ee_ticks: u64,
    pub pair_import_ticks: u64,
}

/// How [`compensate`] capped a calibration that a leaf's own calls contradict.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Capped {
    /// The leaf function whose calls set the bound.
    pub point: u32,
    /// Its raw time per call (the smaller of CPU and wall time), ticks × `CALIB_SCALE`.
    pub per_call_ticks: u64,
    /// What every calibrated figure was multiplied by, in millionths (below 1,000,000).
    pub factor_ppm: u64,
}

/// Millionths: [`Capped::factor_ppm`]'s unit.
const PPM: u64 = 1_000_000;
/// The guard acts when a leaf's calls allow less than 90 % of the calibrated `inner`: a
/// spoiled run is about twice the real cost, while a good one can be a few % above a single
/// warm call (the clamps take care of that, and the figures are not touched).
const CAP_BELOW_PPM: u64 = 900_000;
/// Calls a leaf node needs to bound the calibration.
const MIN_LEAF_CALLS: u64 = 100;

impl Compensation {
    /// Whether the runtime calibrated anything (profiles of older runtimes and synthetic ones
    /// did not).
    pub fn calibrated(&self) -> bool {
        self.pair_ticks != 0 || self.pair_flat_ticks != 0
    }

    /// (inner, pair) of a timed event of `point` with call paths, by its kind of trampoline.
    pub fn cost(&self, point: Option<&PointMeta>) -> (u64, u64) {
        let ee = point.is_some_and(|p| p.entry_exit) && self.pair_ee_ticks != 0;
        let import = point.is_some_and(|p| p.kind == stint_layout::meta::POINT_IMPORT) && self.pair_import_ticks != 0;
        match (ee, import) {
            (true, _) => (self.inner_ee_ticks, self.pair_ee_ticks),
            (_, true) => (self.inner_import_ticks, self.pair_import_ticks),
            _ => (self.inner_ticks, self.pair_ticks),
        }
    }
}

impl Compensation {
    /// The wrapper figures (`wrap_event_ticks`, `wrap_slow_ticks`) are measured once, beside
    /// the start-up run of the timed call; when a later run of the timed call came out lower,
    /// the start-up window was slowed as a whole (a busy host slows every kind of event
    /// alike: one at load 6 read a timed call of 24.0 ns against 17.9 later, and a wrapper
    /// event of 22.6 against about 15 ns), so they are scaled by the same ratio.
    fn wrappers_at_the_least_run(&self) -> Compensation {
        let start = self.runs.first().map_or(0, |r| r.pair_ticks);
        let least = self.runs.iter().map(|r| r.pair_ticks).filter(|&v| v != 0).min().unwrap_or(0);
        if start == 0 || least == 0 || least >= start {
            return self.clone();
        }
        let f = |v: u64| (v as u128 * least as u128 / start as u128) as u64;
        Compensation {
            wrap_event_ticks: f(self.wrap_event_ticks),
            wrap_slow_ticks: f(self.wrap_slow_ticks),
            ..self.clone()
        }
    }

    /// Every calibrated figure multiplied by `ppm` millionths.
    fn scaled(&self, ppm: u64) -> Compensation {
        let f = |v: u64| (v as u128 * ppm as u128 / PPM as u128) as u64;
        Compensation {
            pair_ticks: f(self.pair_ticks),
            inner_ticks: f(self.inner_ticks),
            pair_flat_ticks: f(self.pair_flat_ticks),
            inner_flat_ticks: f(self.inner_flat_ticks),
            count_ticks: f(self.count_ticks),
            pair_ee_ticks: f(self.pair_ee_ticks),
            inner_ee_ticks: f(self.inner_ee_ticks),
            pair_import_ticks: f(self.pair_import_ticks),
            inner_import_ticks: f(self.inner_import_ticks),
            pair_untimed_ticks: f(self.pair_untimed_ticks),
            pair_untimed_ee_ticks: f(self.pair_untimed_ee_ticks),
            inner_sampled_ticks: f(self.inner_sampled_ticks),
            inner_sampled_ee_ticks: f(self.inner_sampled_ee_ticks),
            ..self.clone()
        }
    }

    /// The guard against a spoiled calibration: a leaf node's raw time per call (no timed
    /// callee inside it) is at least the part of its own entry and exit inside its span, so
    /// a calibrated `inner` above the least of them is wrong, and all the figures are scaled
    /// by the same factor (a busy host slows every kind of event alike). `None` when no leaf
    /// contradicts the calibration. Sampled points (scaled estimates) and untimed nodes give
    /// no bound.
    fn leaf_cap(&self, p: &Profile) -> Option<Capped> {
        let mut best: Option<Capped> = None;
        for t in &p.threads {
            let mut has_child = vec![false; t.calltree.len()];
            for n in &t.calltree {
                if let Some(h) = n.parent.and_then(|q| has_child.get_mut(q as usize)) {
                    *h = true;
                }
            }
            for (n, _) in t.calltree.iter().zip(&has_child).filter(|(_, &h)| !h) {
                if n.calls == 0 || t.sampled.iter().any(|s| s.point == n.point) {
                    continue;
                }
                // The smaller of the two (CPU time leaves out preemptions); over at least
                // `MIN_LEAF_CALLS` calls, so that the CPU clock of a short span, which can fall a
                // little behind its extrapolation, does not set the bound.
                let measured = match (n.cpu_ticks, n.wall_ticks) {
                    _ if n.calls < MIN_LEAF_CALLS => continue,
                    (0, 0) => continue,
                    (0, v) | (v, 0) => v,
                    (c, w) => c.min(w),
                };
                let meta = p.points.get(n.point as usize).filter(|m| m.id == n.point);
                let inner = self.cost(meta).0;
                if inner == 0 {
                    continue;
                }
                let per_call = (measured as u128 * stint_layout::CALIB_SCALE as u128 / n.calls as u128) as u64;
                let ppm = (per_call as u128 * PPM as u128 / inner as u128).min(PPM as u128) as u64;
                if ppm < CAP_BELOW_PPM && best.is_none_or(|b| ppm < b.factor_ppm) {
                    best = Some(Capped { point: n.point, per_call_ticks: per_call, factor_ppm: ppm });
                }
            }
        }
        best
    }

    /// What an untimed call of a sampled `point` costs its caller (the timed pair when the
    /// runtime did not calibrate it).
    pub fn untimed_pair(&self, point: Option<&PointMeta>) -> u64 {
        let ee = point.is_some_and(|p| p.entry_exit) && self.pair_untimed_ee_ticks != 0;
        match (ee, self.pair_untimed_ticks) {
            (true, _) => self.pair_untimed_ee_ticks,
            (false, 0) => self.cost(point).1,
            (false, t) => t,
        }
    }

    /// The part of a sampled point's timed call inside its own span (the timed `inner` when
    /// the runtime did not calibrate it).
    pub fn sampled_inner(&self, point: Option<&PointMeta>) -> u64 {
        let ee = point.is_some_and(|p| p.entry_exit) && self.inner_sampled_ee_ticks != 0;
        match (ee, self.inner_sampled_ticks) {
            (true, _) => self.inner_sampled_ee_ticks,
            (false, 0) => self.cost(point).0,
            (false, t) => t,
        }
    }
}

/// Subtract the calibrated cost of the instrumentation from every time of `p` (see
/// [`Compensation`]); never below zero (clamped, counted). Does nothing if `p` has no
/// calibration or was compensated already.
pub fn compensate(p: &mut Profile) {
    let mut c = p.compensation.clone();
    if !c.calibrated() || c.applied {
        return;
    }
    c = c.wrappers_at_the_least_run();
    if let Some(cap) = c.leaf_cap(p) {
        c = c.scaled(cap.factor_ppm);
        c.capped = Some(cap);
    }
    let mut clamped = 0u64;
    for t in &mut p.threads {
        let measured: Vec<u32> =
            t.times.iter().filter(|&&(_, cpu, wall)| cpu != 0 || wall != 0).map(|&(point, _, _)| point).collect();
        clamped += compensate_thread(&c, &p.points, t);
        t.compensated_to_zero = t
            .times
            .iter()
            .filter(|&&(point, cpu, wall)| cpu == 0 && wall == 0 && measured.contains(&point))
            .map(|&(point, _, _)| point)
            .collect();
    }
    c.applied = true;
    c.clamped = clamped;
    p.compensation = c;
}

/// [`compensate`] for one thread's times and call tree; returns how many times were clamped.
fn compensate_thread(c: &Compensation, points: &[PointMeta], t: &mut ThreadProfile) -> u64 {
    if t.calltree.is_empty() {
        // Each function's own share only: one root node per function with its counted
        // calls (and no times of its own, so only `times` is reduced and counted).
        let mut roots: Vec<CallNode> = t
            .times
            .iter()
            .map(|&(point, _, _)| {
                let calls = t.counts.iter().find(|c| c.0 == point).map_or(0, |c| c.1);
                CallNode { parent: None, point, calls, ..CallNode::default() }
            })
            .collect();
        return crate::calltree::compensate(&mut roots, &mut t.times, |_| (c.inner_flat_ticks, 0));
    }
    let mut clamped =
        crate::calltree::subtract_wrappers(&mut t.calltree, &mut t.times, c.wrap_event_ticks, c.wrap_slow_ticks);
    let sampled = &t.sampled;
    clamped += crate::calltree::compensate(&mut t.calltree, &mut t.times, |point| {
        let meta = points.get(point as usize).filter(|m| m.id == point);
        let (inner, pair) = c.cost(meta);
        // A sampled point's calls: the timed ones cost `pair` each, the others the
        // untimed pair; its times were scaled to all calls, so `inner` stands per call.
        match sampled.iter().find(|s| s.point == point) {
            Some(s) if s.calls > 0 => {
                let untimed = c.untimed_pair(meta);
                let mixed =
                    (s.timed as u128 * pair as u128 + (s.calls - s.timed) as u128 * untimed as u128) / s.calls as u128;
                (c.sampled_inner(meta), mixed as u64)
            }
            _ => (inner, pair),
        }
    });
    clamped
}

/// What the header says about the process image (D22).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessInfo {
    /// Kernel start time of the process in clock ticks since boot (0: unknown): the same
    /// for every image of one process across `exec`.
    pub start_ticks: u64,
    /// `argc` of the image.
    pub argc: u32,
    /// The arguments the file holds (the first ones when `argv_truncated`).
    pub argv: Vec<String>,
    /// The arguments did not fit and were cut.
    pub argv_truncated: bool,
    /// The profile of the image this one replaced by `exec` in the same process.
    pub exec_from: Option<String>,
    /// The profile of the process this one was forked from, when the runtime knew it.
    pub parent_profile: Option<String>,
    /// How the image ended: `running` (no end recorded), `exit`, `signal` or `exec`
    /// ([`ProcessEnd`] names).
    pub end: String,
    /// CLOCK_REALTIME of the recorded end, ns since the epoch (0: none).
    pub end_realtime_ns: u64,
    /// The exit status (`end` = `exit`) or the signal (`end` = `signal`); 0 otherwise.
    #[serde(default)]
    pub end_status: u32,
}

impl ProcessInfo {
    /// The fields of header `h`.
    fn read(h: &FileHeader) -> ProcessInfo {
        let text = |f: &stint_layout::TextField| {
            let t = stint_layout::text_field(f);
            (!t.is_empty()).then(|| String::from_utf8_lossy(t).into_owned())
        };
        let cut = h.flags & FLAG_ARGV_TRUNCATED != 0;
        // Each argument NUL-terminated, then zeros: a cut list ends before `argc`, and its
        // padding reads as empty arguments, which are dropped.
        let mut argv = h
            .argv
            .as_flattened()
            .split(|&c| c == 0)
            .take(h.argc as usize)
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect::<Vec<_>>();
        while cut && argv.last().is_some_and(String::is_empty) {
            argv.pop();
        }
        ProcessInfo {
            start_ticks: h.proc_start_ticks,
            argc: h.argc,
            argv_truncated: cut,
            argv,
            exec_from: text(&h.exec_from),
            parent_profile: text(&h.parent_profile),
            end: ProcessEnd::from_u32(h.end_how).map_or("running", ProcessEnd::name).to_string(),
            end_realtime_ns: h.end_realtime_ns,
            end_status: h.end_status,
        }
    }

    /// The image was replaced by `exec`.
    pub fn ended_by_exec(&self) -> bool {
        self.end == ProcessEnd::Exec.name()
    }
}

/// What the control page says (D10).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ControlInfo {
    /// `metric_bit`s a thread measures when it registers (unless a thread rule names it).
    pub new_thread_mask: u32,
    /// Threads the control file named: (metric bits, tid or 0, name glob).
    pub thread_rules: Vec<(u32, u32, String)>,
    /// Requests posted on the ring so far.
    pub requests: u64,
    /// `seq` of the newest snapshot request (0: none) and when it was posted (CLOCK_REALTIME ns).
    pub last_snapshot: u64,
    pub last_snapshot_realtime_ns: u64,
    /// `none`, `applied`, `rejected` or `ignored`, and the path or the reason.
    pub control_file: String,
    pub control_message: String,
    /// Changes made with `stint ctl`, and when the last was (CLOCK_REALTIME ns).
    pub changes: u64,
    pub last_change_realtime_ns: u64,
}

impl Profile {
    /// The process was created by `fork` of a rewritten program (`ppid` is the parent).
    pub fn fork_child(&self) -> bool {
        self.flags & FLAG_FORK_CHILD != 0
    }

    pub fn point(&self, id: u32) -> Option<&PointMeta> {
        self.points.get(id as usize)
    }

    /// Calls over all threads.
    pub fn total_calls(&self) -> u64 {
        self.threads.iter().fold(0u64, |s, t| s.saturating_add(t.total_calls()))
    }

    /// TSC ticks in nanoseconds (`None` without a calibration).
    pub fn ticks_to_ns(&self, ticks: u64) -> Option<u64> {
        (self.tsc_hz != 0).then(|| (ticks as u128 * 1_000_000_000 / self.tsc_hz as u128).min(u64::MAX as u128) as u64)
    }

    /// Whether point `id` measures the timers (all of its exits are patched).
    pub fn timed(&self, id: u32) -> bool {
        self.point(id).is_some_and(|p| p.bits & stint_layout::TIMER_BITS != 0)
    }

    /// The object with index `index` in the file's table.
    pub fn object(&self, index: u32) -> Option<&ObjectProfile> {
        self.objects.binary_search_by_key(&index, |o| o.index).ok().map(|i| &self.objects[i])
    }

    /// Nanoseconds from the start of the process to TSC value `tsc` (`None` without a
    /// calibration).
    pub fn tsc_to_ns_since_start(&self, tsc: u64) -> Option<u64> {
        self.ticks_to_ns(tsc.saturating_sub(self.start_tsc))
    }

    /// The entry point of the function that contains `pc` (an address in the input ELF):
    /// the entry point with the greatest address at or below `pc`, if the function's size is
    /// unknown or `pc` lies inside it. Wrapper points (thread-library functions) are not
    /// functions of the program and never match.
    pub fn function_at(&self, pc: u64) -> Option<&PointMeta> {
        let mut best: Option<(u64, &PointMeta)> = None;
        for pm in self.points.iter().filter(|pm| pm.kind == POINT_ENTRY) {
            let Some(a) = pm.address_value() else { continue };
            // On equal addresses prefer a point that knows the function's size.
            let better = match best {
                None => true,
                Some((b, bp)) => a > b || (a == b && bp.size == 0 && pm.size != 0),
            };
            if a <= pc && better {
                best = Some((a, pm));
            }
        }
        let (a, pm) = best?;
        (pm.size == 0 || pc - a < pm.size).then_some(pm)
    }
}

/// A synchronisation object of the file's table (D14: named by address and by the function
/// that first used it).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObjectProfile {
    /// Index in the file's table (wait entries and transitions name objects by it).
    pub index: u32,
    /// Run-time address (for a thread: its `pthread_t`).
    pub address: u64,
    /// Return address of the call that first used it, in the input ELF (0: unknown).
    pub first_pc: u64,
    /// `OBJ_*`.
    pub kind: u32,
    /// tid of the thread that first used it.
    pub first_tid: u32,
    /// The data symbol it lies in (`big_lock`, `_PyRuntime+0x1a8`), once
    /// [`Profile::resolve_names`] found one; heap objects have none.
    #[serde(default)]
    pub symbol: Option<String>,
}

impl ObjectProfile {
    /// `mutex`, `condvar`, … (`unknown` for a kind this version does not know).
    pub fn kind_name(&self) -> &'static str {
        object_kind_name(self.kind).unwrap_or("unknown")
    }
}

/// What one thread did with one sync object (a wait-table entry of its column).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WaitProfile {
    /// Index of the object ([`Profile::object`] finds it).
    pub object: u32,
    /// `OBJ_*`.
    pub kind: u32,
    /// Calls that acquired or waited successfully.
    pub count: u64,
    /// Of those, the ones that found the object busy.
    pub contended: u64,
    /// TSC ticks blocked in the calls.
    pub wait_ticks: u64,
    /// TSC ticks the lock was held (`lock_hold`).
    pub hold_ticks: u64,
    /// The longest single call's ticks blocked (since the start: a snapshot does not reset
    /// it) and its return address in the input ELF (0: unknown).
    #[serde(default)]
    pub longest_ticks: u64,
    #[serde(default)]
    pub longest_pc: u64,
}

/// One entry of a thread's state-transition ring.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TransitionProfile {
    /// TSC of the transition.
    pub tsc: u64,
    /// `STATE_*` entered.
    pub state: u32,
    /// Index of the object the thread blocked on, if any.
    pub object: Option<u32>,
}

/// How the reader learns whether a thread still runs and what time it is, for the open
/// state interval of each thread. [`Observer::SYSTEM`] asks `/proc` and the TSC; tests pass
/// their own.
#[derive(Clone, Copy, Debug)]
pub struct Observer {
    /// Whether thread `tid` of process `pid` is alive now.
    pub thread_alive: fn(pid: u32, tid: u32) -> bool,
    /// Whether process `pid` is alive now.
    pub process_alive: fn(pid: u32) -> bool,
    /// The TSC now.
    pub now_tsc: fn() -> u64,
    /// CPU time thread `tid` of process `pid` has used so far, ns (`None`: unknown).
    pub thread_cpu_ns: fn(pid: u32, tid: u32) -> Option<u64>,
    /// Time thread `tid` has spent on a CPU and waiting on a run queue so far, ns
    /// (`/proc/<pid>/task/<tid>/schedstat` fields 1 and 2; `None`: unknown).
    pub thread_sched_ns: fn(pid: u32, tid: u32) -> Option<(u64, u64)>,
}

impl Observer {
    /// This machine: `/proc/<pid>` (not a zombie), `/proc/<pid>/task/<tid>`, `rdtsc`.
    pub const SYSTEM: Observer = Observer {
        thread_alive: system_thread_alive,
        process_alive: system_process_alive,
        now_tsc: system_tsc,
        thread_cpu_ns: system_thread_cpu_ns,
        thread_sched_ns: system_thread_sched_ns,
    };
    /// Every process has ended (the file is read as a post-mortem).
    pub const ENDED: Observer = Observer {
        thread_alive: |_, _| false,
        process_alive: |_| false,
        now_tsc: || 0,
        thread_cpu_ns: |_, _| None,
        thread_sched_ns: |_, _| None,
    };
}

/// `/proc/<pid>/task/<tid>/schedstat`'s first field: the time the thread ran on a CPU, ns (the
/// clock `CLOCK_THREAD_CPUTIME_ID` reads, which the runtime's CPU timers follow).
fn system_thread_cpu_ns(pid: u32, tid: u32) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/schedstat")).ok()?;
    s.split_ascii_whitespace().next()?.parse().ok()
}

/// `/proc/<pid>/task/<tid>/schedstat`'s first two fields: on a CPU, waiting on a run queue, ns.
fn system_thread_sched_ns(pid: u32, tid: u32) -> Option<(u64, u64)> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/schedstat")).ok()?;
    let mut f = s.split_ascii_whitespace().map(str::parse::<u64>);
    Some((f.next()?.ok()?, f.next()?.ok()?))
}

fn system_process_alive(pid: u32) -> bool {
    if pid == 0 {
        return false;
    }
    // `/proc/<pid>/stat` is `pid (comm) S …`; comm may hold ')' so take the last one.
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => {
            let state = stat.rfind(')').and_then(|i| stat[i + 1..].trim_start().chars().next());
            !matches!(state, Some('Z') | Some('X') | None)
        }
        Err(_) => false,
    }
}

fn system_thread_alive(pid: u32, tid: u32) -> bool {
    tid != 0 && system_process_alive(pid) && Path::new(&format!("/proc/{pid}/task/{tid}")).exists()
}

/// The TSC of this CPU.
#[cfg(target_arch = "x86_64")]
#[allow(unsafe_code)]
fn system_tsc() -> u64 {
    // SAFETY: `rdtsc` reads a counter; it has no preconditions and touches no memory.
    unsafe { core::arch::x86_64::_rdtsc() }
}

/// No TSC here: no open interval is added for running threads.
#[cfg(not(target_arch = "x86_64"))]
fn system_tsc() -> u64 {
    0
}

/// One thread incarnation: one live column of the file.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ThreadProfile {
    /// Column index in the file.
    pub index: u32,
    /// Kernel thread id.
    pub tid: u32,
    pub pid: u32,
    /// Thread pointer of the thread (its `pthread_t` on glibc): a join names it.
    #[serde(default)]
    pub owner_tp: u64,
    /// `pthread_setname_np` name, if the runtime recorded one.
    pub name: Option<String>,
    /// Start routine address in the input ELF, if known.
    pub start_routine: Option<u64>,
    /// Point whose event registered the thread.
    pub first_point: Option<u32>,
    /// CLOCK_MONOTONIC at registration, ns.
    pub registered_monotonic_ns: u64,
    /// (point id, calls), ascending by point, non-zero counts only.
    pub counts: Vec<(u32, u64)>,
    /// (point id, inclusive CPU ticks, inclusive wall ticks), ascending by point, timed
    /// points with a non-zero value only.
    pub times: Vec<(u32, u64, u64)>,
    /// Points of `times` whose measured time [`compensate`] took to 0 (their calibrated cost
    /// was above it): timed and closed, unlike a point with no time because none of its calls
    /// returned. Ascending.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub compensated_to_zero: Vec<u32>,
    /// `CLOCK_SOURCE_*` name of the thread's CPU timer, if it had a timer event.
    pub clock_source: Option<String>,
    /// Timer events skipped because a signal handler interrupted a timer routine.
    pub timer_skipped: u64,
    /// Exits that matched no open frame.
    pub unmatched_exits: u64,
    /// Frames closed late because their function left by exception or longjmp.
    pub abandoned_frames: u64,
    /// Frames not kept because the shadow stack was full.
    pub shadow_overflow: u64,
    /// Re-synchronisations of the virtual CPU timer.
    pub resyncs: u64,
    /// Whether the thread was running when the file was read.
    pub alive: bool,
    /// tid of the thread that created it with `pthread_create`, if known.
    pub creator_tid: Option<u32>,
    /// `EXIT_*`: how the thread ended, as far as the runtime saw.
    pub exit_kind: u32,
    /// Value the start routine returned or passed to `pthread_exit`.
    pub exit_value: u64,
    /// CLOCK_MONOTONIC when the thread ended, ns, if the runtime saw it end.
    pub end_monotonic_ns: Option<u64>,
    /// `STATE_*` the thread is in (as last written).
    pub thread_state: u32,
    /// Object the thread is blocked on now, if any.
    pub state_object: Option<u32>,
    /// TSC ticks in each `STATE_*`, the open interval included (see the module docs).
    pub state_ticks: [u64; N_STATES as usize],
    /// TSC of the thread's last wrapper event (0: none).
    pub last_tsc: u64,
    /// Transitions the thread wrote to its ring (the last `RING_CAP` are kept).
    pub ring_head: u64,
    /// Wrapper events whose bookkeeping was skipped (signal handler in the runtime, or the
    /// wait table was full).
    pub wrap_skipped: u64,
    /// The thread's waits per object, ascending by object index.
    pub waits: Vec<WaitProfile>,
    /// The kept state transitions, oldest first.
    pub transitions: Vec<TransitionProfile>,
    /// `metric_bit`s this thread measures (ANDed with each point's gate).
    #[serde(default)]
    pub thread_mask: u32,
    /// `seq` of the snapshot whose baseline the thread holds (0: none).
    #[serde(default)]
    pub snapshot: u64,
    /// Points whose times in `times` include a call that had not returned when the file was
    /// read: its frame's time up to then was added (live threads only).
    #[serde(default)]
    pub open_frames: Vec<u32>,
    /// The thread's calling-context tree (D16), parents before children; empty when the
    /// profile has no call paths. See [`crate::calltree`].
    #[serde(default)]
    pub calltree: Vec<crate::calltree::CallNode>,
    /// Call-path nodes the thread could not record because its tree was full.
    #[serde(default)]
    pub calltree_lost: u64,
    /// Points whose calls were sampled on this thread (short and frequent: one call in
    /// `SAMPLE_EVERY` timed after the first `SAMPLE_LEARN`), ascending by point. Their times
    /// in `times` and `calltree` are estimates: the timed calls' time × calls / timed.
    #[serde(default)]
    pub sampled: Vec<Sampled>,
    /// Time on a CPU and waiting on a run queue over the thread's life, ns: read by the
    /// runtime as the thread ended, or now for a live thread (`None`: unknown, e.g. a main
    /// thread that ended without a record). Splits RUN (see [`ThreadProfile::run_split`]).
    #[serde(default)]
    pub sched_ns: Option<(u64, u64)>,
}

/// A sampled point on one thread ([`ThreadProfile::sampled`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sampled {
    pub point: u32,
    /// Calls of the point (exact).
    pub calls: u64,
    /// Of those, the timed ones; the point's times are scaled by `calls / timed`.
    pub timed: u64,
    /// The estimate's error bound, TSC ticks: twice its standard error (≈ 95 %), from the
    /// variance of the timed calls' spans, CPU and wall.
    pub cpu_bound_ticks: u64,
    pub wall_bound_ticks: u64,
    /// The point's CPU and wall ticks before scaling (its timed calls' time): what a view of
    /// an interval between two readings needs ([`interval_ticks`]).
    #[serde(default)]
    pub raw_cpu_ticks: u64,
    #[serde(default)]
    pub raw_wall_ticks: u64,
    /// Of `calls` and `timed`, the learning calls before the runtime decided to sample the
    /// point (every one timed), and their CPU and wall ticks: the exact part of the
    /// estimate, which scales only the other calls' time. The wall ticks also hold, once
    /// each, the ticks later timed calls spent off a CPU when the thread was switched out
    /// inside them (seen at their own exit): a stall is not scaled to every untimed call.
    #[serde(default)]
    pub learn_calls: u64,
    #[serde(default)]
    pub learn_cpu_ticks: u64,
    #[serde(default)]
    pub learn_wall_ticks: u64,
}

/// Calls before the runtime decides to sample a point whose time its `SLOT_LEARN_*` hold: the
/// counters are copied at the `SAMPLE_LEARN`-th entry, when the calls before it have ended.
pub const LEARN_CALLS: u64 = stint_layout::SAMPLE_LEARN - 1;

/// The estimated ticks of `calls` calls of which `timed` were timed and took `raw` ticks,
/// `learn_calls` of them (all timed) `learn` ticks: the learning calls as they are, the other
/// timed calls' time × the other calls ÷ the other timed calls (two strata, so the learning
/// calls weigh as the calls they are, not as one in `SAMPLE_EVERY`). `raw` when nothing was
/// left untimed.
pub fn stratified(calls: u64, timed: u64, raw: u64, learn_calls: u64, learn: u64) -> u64 {
    if calls <= timed || timed <= learn_calls {
        return raw;
    }
    let learn = learn.min(raw);
    let rest = (raw - learn) as u128 * (calls - learn_calls) as u128 / (timed - learn_calls) as u128;
    (learn as u128 + rest).min(u64::MAX as u128) as u64
}

/// A point's timing on one thread as [`stratified`] takes it: (calls, timed calls, unscaled
/// CPU and wall ticks, learning calls, their CPU and wall ticks). A point not sampled there
/// has every call timed, each an exact one: its learning calls are all its calls.
type Figures = (u64, u64, u64, u64, u64, u64, u64);

fn timing_figures(t: &ThreadProfile, point: u32) -> Figures {
    if let Some(s) = t.sampled.iter().find(|s| s.point == point) {
        return (
            s.calls,
            s.timed,
            s.raw_cpu_ticks,
            s.raw_wall_ticks,
            s.learn_calls,
            s.learn_cpu_ticks,
            s.learn_wall_ticks,
        );
    }
    let calls = t.counts.iter().find(|c| c.0 == point).map_or(0, |c| c.1);
    let (cpu, wall) = t.times.iter().find(|x| x.0 == point).map_or((0, 0), |x| (x.1, x.2));
    (calls, calls, cpu, wall, calls, cpu, wall)
}

/// The CPU and wall ticks of `point` on a thread between two readings of it (`then`: the
/// earlier one, `None` when the thread did not exist yet): for a sampled point, the
/// interval's own strata ([`stratified`]: its learning calls, then its other timed calls'
/// time × its other calls ÷ its other timed calls), not the difference of two whole-run
/// estimates (whose scale changes between the readings); for any other point, the difference.
pub fn interval_ticks(then: Option<&ThreadProfile>, now: &ThreadProfile, point: u32) -> (u64, u64) {
    let (c1, t1, cpu1, wall1, l1, lcpu1, lwall1) = timing_figures(now, point);
    let (c0, t0, cpu0, wall0, l0, lcpu0, lwall0) = then.map_or((0, 0, 0, 0, 0, 0, 0), |t| timing_figures(t, point));
    let d = |a: u64, b: u64| a.saturating_sub(b);
    let (calls, timed, learn) = (d(c1, c0), d(t1, t0), d(l1, l0));
    (
        stratified(calls, timed, d(cpu1, cpu0), learn, d(lcpu1, lcpu0)),
        stratified(calls, timed, d(wall1, wall0), learn, d(lwall1, lwall0)),
    )
}

/// A sampled point's figures as read from its column (or since the snapshot's baseline).
#[derive(Clone, Copy, Debug, Default)]
struct SampledAt {
    point: u32,
    /// Timed entries, learning ones included.
    timed: u64,
    /// Of those, the sampled ones (after the learning calls), and the sums of their squared
    /// CPU and wall spans.
    n_sq: u64,
    sq_cpu: u64,
    sq_wall: u64,
    /// The learning calls and their CPU and wall ticks.
    learn_calls: u64,
    learn_cpu: u64,
    learn_wall: u64,
}

/// Twice the standard error of `calls × mean` estimated from `timed` spans whose `n_sq`
/// sampled ones have squares summing to `sq` (finite-population corrected). Their mean
/// square stands for the variance: an upper bound of it (the sampled calls' own sum is not
/// kept apart from the learning calls', whose first call can hold a slow path), so the
/// bound is conservative by about the ratio of the calls' mean to their spread.
fn bound(calls: u64, timed: u64, sq: u64, n_sq: u64) -> u64 {
    if timed == 0 || n_sq == 0 {
        return 0;
    }
    let var = sq as f64 / n_sq as f64;
    let fpc = (1.0 - timed as f64 / calls as f64).max(0.0);
    (2.0 * calls as f64 * (var / timed as f64 * fpc).sqrt()) as u64
}

/// Scale the times of the thread's sampled points (`sampled`, from `SLOT_ACTIVE` and the
/// squares' slots) from their timed calls to all their calls (exact: `counts`, or the sum of
/// the point's call-path nodes): the estimate of a point's time, with its error bound.
fn estimate_sampled(
    sampled: &[SampledAt],
    counts: &[(u32, u64)],
    times: &mut [(u32, u64, u64)],
    calltree: &mut [crate::calltree::CallNode],
) -> Vec<Sampled> {
    let mut out = Vec::new();
    for a in sampled {
        let point = a.point;
        let calls = match counts.iter().find(|c| c.0 == point) {
            Some(&(_, c)) => c,
            None => calltree.iter().filter(|n| n.point == point).map(|n| n.calls).fold(0, u64::saturating_add),
        };
        if a.timed <= a.learn_calls || calls <= a.timed {
            continue;
        }
        let (raw_cpu_ticks, raw_wall_ticks) = times.iter().find(|t| t.0 == point).map_or((0, 0), |t| (t.1, t.2));
        // The bound is the sampled stratum's: the learning calls are exact.
        let (n_calls, n_timed) = (calls - a.learn_calls, a.timed - a.learn_calls);
        let cpu_bound_ticks = bound(n_calls, n_timed, a.sq_cpu, a.n_sq);
        let wall_bound_ticks = bound(n_calls, n_timed, a.sq_wall, a.n_sq);
        let cpu = stratified(calls, a.timed, raw_cpu_ticks, a.learn_calls, a.learn_cpu);
        let wall = stratified(calls, a.timed, raw_wall_ticks, a.learn_calls, a.learn_wall);
        for t in times.iter_mut().filter(|t| t.0 == point) {
            (t.1, t.2) = (cpu, wall);
        }
        // The call-path nodes share the point's estimate in proportion to their timed ticks.
        let share = |v: &mut u64, est: u64, raw: u64| {
            *v = if raw == 0 { 0 } else { (*v as u128 * est as u128 / raw as u128).min(u64::MAX as u128) as u64 }
        };
        for n in calltree.iter_mut().filter(|n| n.point == point) {
            share(&mut n.cpu_ticks, cpu, raw_cpu_ticks);
            share(&mut n.wall_ticks, wall, raw_wall_ticks);
        }
        out.push(Sampled {
            point,
            calls,
            timed: a.timed,
            cpu_bound_ticks,
            wall_bound_ticks,
            raw_cpu_ticks,
            raw_wall_ticks,
            learn_calls: a.learn_calls,
            learn_cpu_ticks: a.learn_cpu.min(raw_cpu_ticks),
            learn_wall_ticks: a.learn_wall.min(raw_wall_ticks),
        });
    }
    out
}

impl ThreadProfile {
    pub fn total_calls(&self) -> u64 {
        self.counts.iter().fold(0u64, |s, &(_, c)| s.saturating_add(c))
    }

    /// RUN (outside wrapped thread-library calls) split into (on a CPU, off a CPU, waiting on
    /// a run queue), TSC ticks: the thread's CPU time, its run-queue time (both capped by
    /// RUN), and the rest of RUN, which is I/O, sleep and waits inside libraries the runtime
    /// does not wrap. `None` without schedstat figures or a TSC rate.
    pub fn run_split(&self, tsc_hz: u64) -> Option<(u64, u64, u64)> {
        let (cpu_ns, runq_ns) = self.sched_ns?;
        if tsc_hz == 0 {
            return None;
        }
        let run = self.state_ticks[stint_layout::STATE_RUN as usize];
        let cpu = ns_to_ticks(cpu_ns, tsc_hz).min(run);
        let runq = ns_to_ticks(runq_ns, tsc_hz).min(run - cpu);
        Some((cpu, run - cpu - runq, runq))
    }

    /// Ticks in every state but `EXITED`: what the thread was observed for.
    pub fn observed_ticks(&self) -> u64 {
        (0..stint_layout::N_STATES)
            .filter(|&s| s != stint_layout::STATE_EXITED)
            .fold(0u64, |a, s| a.saturating_add(self.state_ticks[s as usize]))
    }

    /// [`Self::run_split`] as % of [`Self::observed_ticks`] (CPU%, OFFCPU%, RUNQ%), the
    /// figures `report --by thread`, the JSON and `top` show.
    pub fn run_split_pct(&self, tsc_hz: u64) -> Option<(f64, f64, f64)> {
        let observed = self.observed_ticks();
        let (cpu, off, runq) = self.run_split(tsc_hz).filter(|_| observed != 0)?;
        let pct = |t: u64| t as f64 * 100.0 / observed as f64;
        Some((pct(cpu), pct(off), pct(runq)))
    }

    /// Whether this is the process's main thread.
    pub fn is_main(&self, p: &Profile) -> bool {
        self.tid == p.pid
    }
}

/// Read a profile file (once; it may be live) and parse it.
pub fn load(path: &Path) -> Result<Profile, ProfileError> {
    load_with(path, &Observer::SYSTEM)
}

/// [`load`] with the given view of which threads still run.
pub fn load_with(path: &Path, obs: &Observer) -> Result<Profile, ProfileError> {
    let bytes = std::fs::read(path).map_err(ProfileError::Read)?;
    parse_with(&bytes, obs)
}

/// Parse the bytes of a profile file.
pub fn parse(b: &[u8]) -> Result<Profile, ProfileError> {
    parse_with(b, &Observer::SYSTEM)
}

/// [`parse`] with the given view of which threads still run.
pub fn parse_with(b: &[u8], obs: &Observer) -> Result<Profile, ProfileError> {
    parse_opts(b, obs, false)
}

/// Read a live or final profile and keep only what happened after the newest snapshot
/// (`stint ctl snapshot`): every count, time, wait and state time minus the thread's
/// baseline. A thread that had not reached a safe point yet has counted nothing since.
pub fn load_since_snapshot(path: &Path) -> Result<Profile, ProfileError> {
    let b = std::fs::read(path).map_err(ProfileError::Read)?;
    let p = parse_opts(&b, &Observer::SYSTEM, true)?;
    if p.control.last_snapshot == 0 {
        return Err(ProfileError::Meta("no snapshot was taken (stint ctl <profile> snapshot)".into()));
    }
    Ok(p)
}

/// [`parse_with`], optionally relative to the newest snapshot (see [`load_since_snapshot`]);
/// times compensated for the instrumentation's cost (D21, [`compensate`]).
pub fn parse_opts(b: &[u8], obs: &Observer, since_snapshot: bool) -> Result<Profile, ProfileError> {
    parse_full(b, obs, since_snapshot, false)
}

/// Read a profile as [`load`] or [`load_since_snapshot`] do, with the measured times as they
/// are when `raw` (`stint report --raw`), compensated otherwise.
pub fn load_opts(path: &Path, since_snapshot: bool, raw: bool) -> Result<Profile, ProfileError> {
    let b = std::fs::read(path).map_err(ProfileError::Read)?;
    let p = parse_full(&b, &Observer::SYSTEM, since_snapshot, raw)?;
    if since_snapshot && p.control.last_snapshot == 0 {
        return Err(ProfileError::Meta("no snapshot was taken (stint ctl <profile> snapshot)".into()));
    }
    Ok(p)
}

/// [`parse_opts`], with the raw times when `raw`.
pub fn parse_full(b: &[u8], obs: &Observer, since_snapshot: bool, raw: bool) -> Result<Profile, ProfileError> {
    let mut p = parse_measured(b, obs, since_snapshot)?;
    if !raw {
        compensate(&mut p);
    }
    Ok(p)
}

/// The profile with the times as measured.
fn parse_measured(b: &[u8], obs: &Observer, since_snapshot: bool) -> Result<Profile, ProfileError> {
    let h = FileHeader::parse(b, b.len() as u64)?;
    let meta_bytes = region(b, h.meta_offset, h.meta_len).ok_or(FormatError::Truncated)?;
    let meta = parse_meta(meta_bytes, &h)?;
    let calls_slot = match meta.metrics.iter().find(|m| m.name == CALLS_METRIC) {
        Some(MetricMeta { slot: Some(slot), .. }) if *slot < h.n_counter_slots => Some(*slot),
        Some(m) => {
            return Err(ProfileError::Meta(match m.slot {
                Some(slot) => {
                    format!("metric {} uses counter slot {slot}, but columns have {} slots", m.name, h.n_counter_slots)
                }
                None => format!("metric {} has no counter slot", m.name),
            }));
        }
        // A spec without the calls metric: threads, but no counts.
        None => None,
    };
    let slot_of = |name: &str| meta.metrics.iter().find(|m| m.name == name).and_then(|m| m.slot);
    let time_slots = match (slot_of(CPU_METRIC), slot_of(WALL_METRIC)) {
        (Some(c), Some(w)) if c < h.n_counter_slots && w < h.n_counter_slots => Some((c, w)),
        (None, None) => None,
        _ => return Err(ProfileError::Meta("timer metrics without valid counter slots".into())),
    };

    // An image replaced by `exec` is gone even though its process still runs.
    let alive = h.end_how == ProcessEnd::Running as u32 && (obs.process_alive)(h.pid);
    let now_tsc = if alive { (obs.now_tsc)() } else { 0 };
    let control = control_info(b, &h);
    let snapshot = (since_snapshot && control.last_snapshot != 0).then_some(control.last_snapshot);
    let mut objects = Objects::read(b, &h);
    // The rewriter's own warnings first: thread-library calls no wrapper sees.
    let mut warnings: Vec<String> = meta.unwrapped.clone();

    let mut threads = Vec::new();
    for i in 0..h.n_columns {
        let col = b.get(h.column_range(i)).ok_or(FormatError::Truncated)?;
        let c = ColumnHeader::parse(col)?;
        if c.state != COLUMN_LIVE {
            continue;
        }
        if c.index != i {
            return Err(ProfileError::Corrupt(format!("column {i} says it is column {}", c.index)));
        }
        let first_point = match c.first_point {
            u32::MAX => None,
            p if p >= h.n_points => {
                return Err(ProfileError::Corrupt(format!(
                    "point {p} in column {i} is out of range (the file has {} points)",
                    h.n_points
                )));
            }
            p => Some(p),
        };
        let mut counts = Vec::new();
        if let Some(slot) = calls_slot {
            for point in 0..h.n_points {
                let n = ColumnHeader::counter(col, h.n_points, slot, point).ok_or_else(|| {
                    ProfileError::Corrupt(format!("counter of point {point} lies outside column {i}"))
                })?;
                if n != 0 {
                    counts.push((point, n));
                }
            }
        }
        let mut times = Vec::new();
        if let Some((cs, ws)) = time_slots {
            for point in (0..h.n_points).filter(|&p| meta.points[p as usize].bits & stint_layout::TIMER_BITS != 0) {
                let get = |slot| {
                    ColumnHeader::counter(col, h.n_points, slot, point)
                        .ok_or_else(|| ProfileError::Corrupt(format!("timer of point {point} lies outside column {i}")))
                };
                let (cpu, wall) = (get(cs)?, get(ws)?);
                if cpu != 0 || wall != 0 {
                    times.push((point, cpu, wall));
                }
            }
        }
        // Points sampled on this thread (their `SLOT_ACTIVE` word) and their timed entries.
        let mut sampled_at = Vec::new();
        for point in (0..h.n_points).filter(|&p| meta.points[p as usize].bits & stint_layout::TIMER_BITS != 0) {
            let active = ColumnHeader::counter(col, h.n_points, stint_layout::SLOT_ACTIVE, point).unwrap_or(0);
            if active & stint_layout::SAMPLE_ON != 0 {
                let get = |slot| ColumnHeader::counter(col, h.n_points, slot, point).unwrap_or(0);
                let n_sq = get(stint_layout::SLOT_SAMPLED_TIMED);
                sampled_at.push(SampledAt {
                    point,
                    timed: stint_layout::SAMPLE_LEARN.saturating_add(n_sq),
                    n_sq,
                    sq_cpu: get(stint_layout::SLOT_SAMPLED_SQ_CPU),
                    sq_wall: get(stint_layout::SLOT_SAMPLED_SQ_WALL),
                    learn_calls: LEARN_CALLS,
                    learn_cpu: get(stint_layout::SLOT_LEARN_CPU),
                    learn_wall: get(stint_layout::SLOT_LEARN_WALL),
                });
            }
        }
        let thread_alive = alive && c.thread_state != STATE_EXITED && (obs.thread_alive)(h.pid, c.tid);
        let mut state_ticks = c.state_ticks;
        if let Some(t) = state_ticks.get_mut(c.thread_state as usize) {
            *t = t.saturating_add(open_interval(&c, thread_alive, now_tsc));
        }
        let mut waits = read_waits(col, &c, b, &h, &mut objects, &mut warnings);
        let transitions = read_ring(col, &c, b, &h, &mut objects);
        if let Some(seq) = snapshot {
            let mut d = Deltas { counts: &mut counts, times: &mut times, waits: &mut waits, states: &mut state_ticks };
            if c.snap_seq == seq {
                subtract_baseline(col, &h, &mut d);
                sampled_since_baseline(col, &h, &mut sampled_at);
            } else {
                // Not at a safe point since the request: nothing counted since, and the
                // thread has stayed in its state since then.
                let since_ns = (realtime_now_ns().saturating_sub(control.last_snapshot_realtime_ns)) as u128;
                let ticks = (since_ns * h.tsc_hz as u128 / 1_000_000_000) as u64;
                d.counts.clear();
                d.times.clear();
                d.waits.clear();
                for (i, t) in d.states.iter_mut().enumerate() {
                    *t = if i == c.thread_state as usize { (*t).min(ticks) } else { 0 };
                }
            }
        }
        // Frames still open on a live thread count up to now (after a snapshot: up to now from
        // the snapshot, which is when the thread took its baseline, or when it was asked to).
        // The tree has no snapshot baseline: a view since a snapshot shows none.
        let mut calltree = if snapshot.is_some() { Vec::new() } else { read_calltree(col, &c, &h, i)? };
        let mut open_frames = Vec::new();
        if thread_alive && time_slots.is_some() {
            let cpu_now = (obs.thread_cpu_ns)(h.pid, c.tid).map(|ns| ns_to_ticks(ns, h.tsc_hz));
            let since = snapshot.map(|seq| {
                if c.snap_seq == seq {
                    c.snap_tsc
                } else {
                    let since_ns = realtime_now_ns().saturating_sub(control.last_snapshot_realtime_ns);
                    now_tsc.saturating_sub(ns_to_ticks(since_ns, h.tsc_hz))
                }
            });
            let now = OpenNow { wall: now_tsc, cpu: cpu_now, since };
            open_frames = add_open_frames(col, &c, &meta.points, now, &mut times, &mut calltree);
        }
        let sampled = estimate_sampled(&sampled_at, &counts, &mut times, &mut calltree);
        threads.push(ThreadProfile {
            sampled,
            compensated_to_zero: Vec::new(),
            alive: thread_alive,
            creator_tid: (c.creator_tid != 0).then_some(c.creator_tid),
            exit_kind: c.exit_kind,
            exit_value: c.exit_value,
            end_monotonic_ns: (c.end_monotonic_ns != 0).then_some(c.end_monotonic_ns),
            thread_state: c.thread_state,
            state_object: (c.state_object != u32::MAX).then(|| objects.resolve(b, &h, c.state_object)).flatten(),
            state_ticks,
            last_tsc: c.last_tsc,
            ring_head: c.ring_head,
            wrap_skipped: c.wrap_skipped,
            waits,
            transitions,
            times,
            clock_source: clock_source_name(c.clock_source).map(str::to_owned),
            timer_skipped: c.timer_skipped,
            unmatched_exits: c.unmatched_exits,
            abandoned_frames: c.abandoned_frames,
            shadow_overflow: c.shadow_overflow,
            resyncs: c.resyncs,
            index: i,
            tid: c.tid,
            pid: c.pid,
            owner_tp: c.owner_tp,
            name: thread_name(&c.name),
            start_routine: (c.start_routine != 0).then_some(c.start_routine),
            first_point,
            registered_monotonic_ns: c.registered_monotonic_ns,
            counts,
            thread_mask: c.thread_mask,
            snapshot: c.snap_seq,
            open_frames,
            calltree,
            calltree_lost: c.cct_lost,
            sched_ns: if thread_alive {
                (obs.thread_sched_ns)(h.pid, c.tid)
            } else {
                (c.sched_read == 1).then_some((c.sched_cpu_ns, c.sched_runq_ns))
            },
        });
    }

    Ok(Profile {
        program: meta.program,
        input: meta.input,
        build_id: meta.build_id,
        debuglink: meta.debuglink,
        load_bias: (h.flags & FLAG_LOAD_BIAS != 0).then_some(h.load_bias),
        pid: h.pid,
        ppid: h.ppid,
        flags: h.flags,
        start_realtime_ns: h.start_realtime_ns,
        start_monotonic_ns: h.start_monotonic_ns,
        skipped_reentrant: h.skipped_reentrant,
        lost_threads: h.lost_threads,
        tsc_hz: h.tsc_hz,
        start_tsc: h.start_tsc,
        metrics: meta.metrics,
        points: meta.points,
        threads,
        objects: objects.into_vec(),
        objects_lost: h.objects_lost,
        alive,
        warnings,
        gates: region(b, h.ctl_offset, h.n_points as u64).map(<[u8]>::to_vec).unwrap_or_default(),
        control,
        process: ProcessInfo::read(&h),
        compensation: Compensation {
            pair_ticks: h.calib.pair_ticks,
            inner_ticks: h.calib.inner_ticks,
            pair_flat_ticks: h.calib.pair_flat_ticks,
            inner_flat_ticks: h.calib.inner_flat_ticks,
            count_ticks: h.calib.count_ticks,
            pair_ee_ticks: h.calib.pair_ee_ticks,
            inner_ee_ticks: h.calib.inner_ee_ticks,
            pair_import_ticks: h.calib.pair_import_ticks,
            inner_import_ticks: h.calib.inner_import_ticks,
            pair_untimed_ticks: h.calib.pair_untimed_ticks,
            pair_untimed_ee_ticks: h.calib.pair_untimed_ee_ticks,
            inner_sampled_ticks: h.calib.inner_sampled_ticks,
            inner_sampled_ee_ticks: h.calib.inner_sampled_ee_ticks,
            wrap_event_ticks: h.calib.wrap_event_ticks,
            wrap_slow_ticks: h.calib.wrap_slow_ticks,
            applied: false,
            clamped: 0,
            runs: h
                .calib_runs
                .iter()
                .zip(&h.calib_tsc)
                .take(h.calib_count as usize)
                .map(|(r, &tsc)| CalibrationRun {
                    at_ticks: tsc.saturating_sub(h.start_tsc),
                    pair_ticks: r.pair_ticks,
                    inner_ticks: r.inner_ticks,
                    pair_flat_ticks: r.pair_flat_ticks,
                    inner_flat_ticks: r.inner_flat_ticks,
                    pair_ee_ticks: r.pair_ee_ticks,
                    pair_import_ticks: r.pair_import_ticks,
                })
                .collect(),
            run_count: h.calib_count,
            capped: None,
        },
    })
}

/// The calling-context tree of column `i` (D16): `cct_nodes` nodes, each parent before its
/// children (the runtime makes a node after its parent). A node naming a later parent or a
/// point the file does not have is corruption.
fn read_calltree(col: &[u8], c: &ColumnHeader, h: &FileHeader, i: u32) -> Result<Vec<CallNode>, ProfileError> {
    let n = c.cct_nodes;
    if n > h.cct_cap.min(stint_layout::CCT_CAP) {
        return Err(ProfileError::Corrupt(format!(
            "column {i} has {n} call-tree nodes (capacity {})",
            h.cct_cap.min(stint_layout::CCT_CAP)
        )));
    }
    let base = stint_layout::cct_nodes_offset(h.n_points, h.n_counter_slots) as usize;
    let wraps = stint_layout::cct_wraps_offset(h.n_points, h.n_counter_slots) as usize;
    let slow = stint_layout::cct_slow_offset(h.n_points, h.n_counter_slots) as usize;
    let mut tree = Vec::with_capacity(n as usize);
    for k in 0..n {
        let node = CctNode::read_from(col, base + k as usize * size_of::<CctNode>())
            .ok_or_else(|| ProfileError::Corrupt(format!("call-tree node {k} lies outside column {i}")))?;
        if node.point >= h.n_points || node.parent > k {
            return Err(ProfileError::Corrupt(format!(
                "call-tree node {k} of column {i} names point {} under node {} (the file has {} points)",
                node.point,
                node.parent as i64 - 1,
                h.n_points
            )));
        }
        tree.push(CallNode {
            parent: node.parent.checked_sub(1),
            point: node.point,
            calls: node.calls,
            cpu_ticks: node.cpu_ticks,
            wall_ticks: node.wall_ticks,
            // The runtime's wrapper events of the node (wrapcomp); past the column's end in a
            // truncated file: none.
            wrap_events: u64::read_from(col, wraps + k as usize * 8).unwrap_or(0),
            slow_wrap_events: u64::read_from(col, slow + k as usize * 8).unwrap_or(0),
        });
    }
    Ok(tree)
}

/// CLOCK_REALTIME now, ns since the epoch (the clock of `start_realtime_ns` and requests).
pub fn realtime_now_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos().min(u64::MAX as u128) as u64)
}

/// A thread's figures, to be made relative to its snapshot baseline.
struct Deltas<'a> {
    counts: &'a mut Vec<(u32, u64)>,
    times: &'a mut Vec<(u32, u64, u64)>,
    waits: &'a mut Vec<WaitProfile>,
    states: &'a mut [u64; N_STATES as usize],
}

/// Subtract the column's baseline (its layout: `stint_layout::baseline_*_offset`).
fn subtract_baseline(col: &[u8], h: &FileHeader, d: &mut Deltas) {
    let (n, slots) = (h.n_points, h.n_counter_slots);
    let u64_at = |off: u64| usize::try_from(off).ok().and_then(|off| u64::read_from(col, off)).unwrap_or(0);
    let counter = |slot: u32, point: u32| u64_at(baseline_counter_offset(n, slots, slot, point));
    d.counts.retain_mut(|(p, calls)| {
        *calls = calls.saturating_sub(counter(SLOT_CALLS, *p));
        *calls != 0
    });
    d.times.retain_mut(|(p, cpu, wall)| {
        *cpu = cpu.saturating_sub(counter(SLOT_CPU_TICKS, *p));
        *wall = wall.saturating_sub(counter(SLOT_WALL_TICKS, *p));
        *cpu != 0 || *wall != 0
    });
    // The baseline's wait table is a copy of the column's, slot for slot.
    let mut before: std::collections::BTreeMap<u32, WaitEntry> = std::collections::BTreeMap::new();
    for slot in 0..WAIT_CAP {
        let off = usize::try_from(baseline_wait_offset(n, slots, slot)).ok();
        let Some(w) = off.and_then(|off| WaitEntry::read_from(col, off)) else { break };
        if w.object != 0 {
            let e = before.entry(w.object - 1).or_default();
            e.count = e.count.saturating_add(w.count);
            e.contended = e.contended.saturating_add(w.contended);
            e.wait_ticks = e.wait_ticks.saturating_add(w.wait_ticks);
            e.hold_ticks = e.hold_ticks.saturating_add(w.hold_ticks);
        }
    }
    d.waits.retain_mut(|w| {
        if let Some(b) = before.get(&w.object) {
            w.count = w.count.saturating_sub(b.count);
            w.contended = w.contended.saturating_sub(b.contended);
            w.wait_ticks = w.wait_ticks.saturating_sub(b.wait_ticks);
            w.hold_ticks = w.hold_ticks.saturating_sub(b.hold_ticks);
        }
        w.count != 0 || w.wait_ticks != 0 || w.hold_ticks != 0
    });
    for (i, t) in d.states.iter_mut().enumerate() {
        *t = t.saturating_sub(u64_at(baseline_state_offset(n, slots, i as u32)));
    }
}

/// The sampled points' timed calls and squared spans since the snapshot's baseline, so that
/// a view since a snapshot scales the interval's time by the interval's calls ÷ the
/// interval's timed calls (not the whole run's). A point not yet sampled at the baseline had
/// every call timed until then: its baseline's calls are its timed ones.
fn sampled_since_baseline(col: &[u8], h: &FileHeader, sampled: &mut [SampledAt]) {
    let (n, slots) = (h.n_points, h.n_counter_slots);
    let base = |slot: u32, point: u32| {
        usize::try_from(baseline_counter_offset(n, slots, slot, point))
            .ok()
            .and_then(|off| u64::read_from(col, off))
            .unwrap_or(0)
    };
    for a in sampled.iter_mut() {
        let p = a.point;
        let n_before = base(stint_layout::SLOT_SAMPLED_TIMED, p);
        if base(stint_layout::SLOT_ACTIVE, p) & stint_layout::SAMPLE_ON != 0 {
            // Sampled before the interval: no learning call in it, but the unscaled wall
            // ticks its timed calls spent off a CPU since the baseline (`SLOT_LEARN_WALL`).
            a.timed = a.timed.saturating_sub(stint_layout::SAMPLE_LEARN.saturating_add(n_before));
            let off = a.learn_wall.saturating_sub(base(stint_layout::SLOT_LEARN_WALL, p));
            (a.learn_calls, a.learn_cpu, a.learn_wall) = (0, 0, off);
        } else {
            // Still learning at the baseline: the learning calls after it.
            let calls = base(SLOT_CALLS, p);
            a.timed = a.timed.saturating_sub(calls);
            a.learn_calls = a.learn_calls.saturating_sub(calls);
            a.learn_cpu = a.learn_cpu.saturating_sub(base(SLOT_CPU_TICKS, p));
            a.learn_wall = a.learn_wall.saturating_sub(base(SLOT_WALL_TICKS, p));
        }
        a.n_sq = a.n_sq.saturating_sub(n_before);
        a.sq_cpu = a.sq_cpu.saturating_sub(base(stint_layout::SLOT_SAMPLED_SQ_CPU, p));
        a.sq_wall = a.sq_wall.saturating_sub(base(stint_layout::SLOT_SAMPLED_SQ_WALL, p));
    }
}

fn control_info(b: &[u8], h: &FileHeader) -> ControlInfo {
    let Some(c) = region(b, h.control_offset, size_of::<Control>() as u64).and_then(|r| Control::parse(r).ok()) else {
        return ControlInfo::default();
    };
    let text = |bytes: &[u8]| thread_name(bytes).unwrap_or_default();
    let snap = c.newest(RequestOp::Snapshot as u32).filter(|r| r.seq == c.last_snapshot);
    ControlInfo {
        new_thread_mask: c.new_thread_mask,
        thread_rules: c
            .thread_rules
            .iter()
            .take(c.n_thread_rules.min(THREAD_RULES_CAP as u32) as usize)
            .map(|r| (r.mask, r.tid, text(&r.name)))
            .collect(),
        requests: c.req_head,
        last_snapshot: c.last_snapshot,
        last_snapshot_realtime_ns: snap.map_or(0, |r| r.realtime_ns),
        control_file: ControlFileStatus::from_u32(c.control_file).unwrap_or(ControlFileStatus::None).name().to_string(),
        control_message: text(&c.control_message),
        changes: c.changes,
        last_change_realtime_ns: c.last_change_realtime_ns,
    }
}

/// The sync objects read so far, by index: the table's first `min(n_objects, obj_cap)`
/// complete entries, and any later entry a thread names once it is complete in our copy.
struct Objects(std::collections::BTreeMap<u32, ObjectProfile>);

impl Objects {
    fn read(b: &[u8], h: &FileHeader) -> Objects {
        let mut m = std::collections::BTreeMap::new();
        for i in 0..h.n_objects.min(h.obj_cap) {
            if let Some(o) = object_entry(b, h, i) {
                m.insert(i, o);
            }
        }
        Objects(m)
    }

    /// The index of object `i` if the file records it (`u32::MAX` is "none").
    fn resolve(&mut self, b: &[u8], h: &FileHeader, i: u32) -> Option<u32> {
        if self.0.contains_key(&i) {
            return Some(i);
        }
        let o = object_entry(b, h, i)?;
        self.0.insert(i, o);
        Some(i)
    }

    fn into_vec(self) -> Vec<ObjectProfile> {
        self.0.into_values().collect()
    }
}

/// Entry `i` of the sync-object table, if it lies in the table and is complete.
fn object_entry(b: &[u8], h: &FileHeader, i: u32) -> Option<ObjectProfile> {
    let o = SyncObject::parse(b, h, i)?;
    (o.kind != 0).then_some(ObjectProfile {
        index: i,
        address: o.address,
        first_pc: o.first_pc,
        kind: o.kind,
        first_tid: o.first_tid,
        symbol: None,
    })
}

/// The clocks a live thread's open frames are closed at, TSC ticks.
#[derive(Clone, Copy)]
struct OpenNow {
    wall: u64,
    /// The thread's CPU clock (`None`: unknown, CPU time of open frames not added).
    cpu: Option<u64>,
    /// With `--since-snapshot`: the TSC of the snapshot (open time before it is not counted).
    since: Option<u64>,
}

/// Add to `times` (sorted by point) the time of the frames still open on the shadow stack of a
/// live thread, up to `now`, as the runtime would when they close: only the outermost frame of
/// each point counts (recursion is counted once) and only the timers its entry switched on.
/// Every open frame also adds its time to its calling-context node (as the runtime adds a
/// node's time at every activation), so self times stay inclusive minus children.
/// Returns the points that got time this way. Frames are read bounds-checked: a column written
/// by someone else can make the figures wrong, never the reader fail.
fn add_open_frames(
    col: &[u8],
    c: &ColumnHeader,
    points: &[PointMeta],
    now: OpenNow,
    times: &mut Vec<(u32, u64, u64)>,
    tree: &mut [crate::calltree::CallNode],
) -> Vec<u32> {
    let (wall_bit, cpu_bit) = (metric_bit(METRIC_WALL_TIME) as u32, metric_bit(METRIC_CPU_TIME) as u32);
    let mut open = Vec::new();
    for i in 0..c.depth.min(SHADOW_CAP) {
        let Some(f) = ColumnHeader::frame(col, i) else { break };
        if f.point as usize >= points.len() {
            continue;
        }
        let start = |t: u64| now.since.map_or(t, |s| t.max(s));
        let wall = if f.bits & wall_bit != 0 { now.wall.saturating_sub(start(f.wall_start)) } else { 0 };
        let cpu = match now.cpu {
            // CPU time since a snapshot can be no more than the wall time since it.
            Some(cpu) if f.bits & cpu_bit != 0 => {
                let d = cpu.saturating_sub(f.cpu_start);
                if now.since.is_some() {
                    d.min(wall)
                } else {
                    d
                }
            }
            _ => 0,
        };
        if wall == 0 && cpu == 0 {
            continue;
        }
        if let Some(n) = (f.node as usize).checked_sub(1).and_then(|n| tree.get_mut(n)) {
            n.cpu_ticks = n.cpu_ticks.saturating_add(cpu);
            n.wall_ticks = n.wall_ticks.saturating_add(wall);
        }
        if open.contains(&f.point) {
            continue; // a recursive activation: the outermost one holds the flat time
        }
        open.push(f.point);
        match times.binary_search_by_key(&f.point, |&(p, _, _)| p) {
            Ok(k) => {
                times[k].1 = times[k].1.saturating_add(cpu);
                times[k].2 = times[k].2.saturating_add(wall);
            }
            Err(k) => times.insert(k, (f.point, cpu, wall)),
        }
    }
    open.sort_unstable();
    open
}

/// Nanoseconds as TSC ticks at `tsc_hz`.
fn ns_to_ticks(ns: u64, tsc_hz: u64) -> u64 {
    (ns as u128 * tsc_hz as u128 / 1_000_000_000) as u64
}

/// TSC ticks of the state the thread is in now, not yet in `state_ticks`: up to `now_tsc`
/// if the thread runs, else up to its last wrapper event.
fn open_interval(c: &ColumnHeader, thread_alive: bool, now_tsc: u64) -> u64 {
    if c.thread_state >= N_STATES || c.thread_state == STATE_EXITED || c.state_since == 0 {
        return 0;
    }
    let end = if thread_alive { now_tsc } else { c.last_tsc };
    end.saturating_sub(c.state_since)
}

/// The thread's wait table, entries merged per object; entries naming an object the file
/// does not record are skipped with a warning.
fn read_waits(
    col: &[u8],
    c: &ColumnHeader,
    b: &[u8],
    h: &FileHeader,
    objects: &mut Objects,
    warnings: &mut Vec<String>,
) -> Vec<WaitProfile> {
    let mut waits: std::collections::BTreeMap<u32, WaitProfile> = std::collections::BTreeMap::new();
    for slot in 0..WAIT_CAP {
        let Some(w) = WaitEntry::parse(col, slot) else { break };
        if w.object == 0 {
            continue;
        }
        let Some(object) = objects.resolve(b, h, w.object - 1) else {
            warnings.push(format!(
                "thread {}: wait entry {slot} names sync object {}, which the file does not record \
                 ({} objects, table of {}); skipped",
                c.tid,
                w.object - 1,
                h.n_objects,
                h.obj_cap
            ));
            continue;
        };
        let e = waits.entry(object).or_insert(WaitProfile {
            object,
            kind: objects.0.get(&object).map_or(w.kind, |o| o.kind),
            count: 0,
            contended: 0,
            wait_ticks: 0,
            hold_ticks: 0,
            longest_ticks: 0,
            longest_pc: 0,
        });
        if w.longest_ticks > e.longest_ticks || (e.longest_pc == 0 && w.longest_pc != 0) {
            (e.longest_ticks, e.longest_pc) = (w.longest_ticks, w.longest_pc);
        }
        e.count = e.count.saturating_add(w.count);
        e.contended = e.contended.saturating_add(w.contended);
        e.wait_ticks = e.wait_ticks.saturating_add(w.wait_ticks);
        e.hold_ticks = e.hold_ticks.saturating_add(w.hold_ticks);
    }
    waits.into_values().collect()
}

/// The kept transitions of the thread's ring, oldest first: transition `n` is at
/// `n % RING_CAP`, `ring_head` were written.
fn read_ring(col: &[u8], c: &ColumnHeader, b: &[u8], h: &FileHeader, objects: &mut Objects) -> Vec<TransitionProfile> {
    let first = c.ring_head.saturating_sub(RING_CAP as u64);
    (first..c.ring_head)
        .filter_map(|n| Transition::parse(col, (n % RING_CAP as u64) as u32))
        .map(|t| TransitionProfile {
            tsc: t.tsc,
            state: t.state,
            object: if t.object == u32::MAX { None } else { objects.resolve(b, h, t.object) },
        })
        .collect()
}

fn region(b: &[u8], offset: u64, len: u64) -> Option<&[u8]> {
    let start = usize::try_from(offset).ok()?;
    let end = start.checked_add(usize::try_from(len).ok()?)?;
    b.get(start..end)
}

fn parse_meta(bytes: &[u8], h: &FileHeader) -> Result<stint_layout::meta::Meta, ProfileError> {
    let meta: stint_layout::meta::Meta = serde_json::from_slice(bytes).map_err(meta_json_error)?;
    if meta.schema != META_SCHEMA {
        return Err(ProfileError::Meta(format!(
            "schema {:?} is not supported (this stint reads {META_SCHEMA})",
            meta.schema
        )));
    }
    if meta.points.len() as u64 != h.n_points as u64 {
        return Err(ProfileError::Meta(format!("{} points, but the header says {}", meta.points.len(), h.n_points)));
    }
    if let Some((i, p)) = meta.points.iter().enumerate().find(|(i, p)| p.id as usize != *i) {
        return Err(ProfileError::Meta(format!("point at index {i} has id {}", p.id)));
    }
    Ok(meta)
}

fn meta_json_error(e: serde_json::Error) -> ProfileError {
    use serde_json::error::Category;
    let text = e.to_string();
    let location = format!(" at line {} column {}", e.line(), e.column());
    let what = text.strip_suffix(&location).unwrap_or(&text);
    match e.classify() {
        Category::Syntax | Category::Eof => {
            ProfileError::Meta(format!("invalid JSON at line {} column {}: {what}", e.line(), e.column()))
        }
        Category::Data | Category::Io => ProfileError::Meta(text),
    }
}

/// The NUL-padded name of a column, `None` if empty.
fn thread_name(raw: &[u8]) -> Option<String> {
    let len = raw.iter().position(|&c| c == 0).unwrap_or(raw.len());
    (len > 0).then(|| String::from_utf8_lossy(&raw[..len]).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::synthetic::*;
    use stint_layout::{
        column_size, ctl_len, ObjBucket, COLUMN_EMPTY, EXIT_RETURNED, FILE_MAGIC, FILE_VERSION, FLAG_TID_KEY_VERIFIED,
        N_COUNTER_SLOTS, OBJ_CONDVAR, OBJ_MUTEX, PAGE, RING_OFFSET, STATE_BLOCKED_CONDVAR, STATE_BLOCKED_MUTEX,
        STATE_RUN, WAITS_OFFSET,
    };

    fn meta5() -> String {
        synthetic_meta(
            "pigz",
            &[("main", "0x1139"), ("worker", "0x1189"), ("mid", "0x11c0"), ("leaf", "0x1200"), ("mid", "0x11c0")],
        )
    }

    fn sample() -> Vec<u8> {
        write_synthetic(
            &meta5(),
            &[(100, vec![(0, 1), (2, 3)]), (101, vec![(1, 1), (2, 1000), (3, 500)]), (102, vec![])],
        )
    }

    fn err(b: &[u8]) -> String {
        parse(b).expect_err("corrupt input accepted").to_string()
    }

    /// A temporary file that removes itself.
    struct TempFile(std::path::PathBuf);

    impl TempFile {
        fn new(tag: &str, bytes: &[u8]) -> TempFile {
            let path = std::env::temp_dir().join(format!("stint-profile-test-{}-{tag}.stint", std::process::id()));
            std::fs::write(&path, bytes).unwrap();
            TempFile(path)
        }
    }

    impl Drop for TempFile {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }

    #[test]
    fn header_and_column_bytes_round_trip() {
        let h = FileHeader {
            magic: FILE_MAGIC,
            version: FILE_VERSION,
            header_size: 2,
            pid: 3,
            ppid: 4,
            flags: 5,
            n_points: 6,
            n_metrics: 7,
            n_counter_slots: 8,
            ctl_offset: 9,
            ctl_len: 10,
            meta_offset: 11,
            meta_len: 12,
            columns_offset: 13,
            column_size: column_size(6, 8),
            n_columns: 15,
            capacity_columns: 16,
            start_realtime_ns: 17,
            start_monotonic_ns: 18,
            skipped_reentrant: 19,
            lost_threads: 20,
            reg_lock: 21,
            tid_offset: 22,
            file_len: 23,
            tsc_hz: 24,
            objects_offset: 25,
            obj_buckets: 26,
            obj_cap: 27,
            n_objects: 28,
            cct_cap: 0,
            objects_lost: 29,
            start_tsc: 30,
            control_offset: 31,
            proc_start_ticks: 32,
            end_how: 33,
            argc: 34,
            end_realtime_ns: 35,
            argv: [[36; 32]; 32],
            exec_from: [[37; 32]; 32],
            parent_profile: [[38; 32]; 32],
            load_bias: 32,
            end_status: 39,
            _pad_end: 0,
            calib: stint_layout::Calibration {
                pair_ticks: 39,
                inner_ticks: 40,
                pair_flat_ticks: 41,
                inner_flat_ticks: 42,
                count_ticks: 43,
                batches: 44,
                per_batch: 45,
                pair_ee_ticks: 46,
                inner_ee_ticks: 47,
                pair_import_ticks: 48,
                inner_import_ticks: 49,
                pair_untimed_ticks: 50,
                pair_untimed_ee_ticks: 51,
                inner_sampled_ticks: 52,
                inner_sampled_ee_ticks: 53,
                wrap_event_ticks: 54,
                wrap_slow_ticks: 62,
            },
            calib_count: 55,
            _pad_calib: 0,
            calib_tsc: [56, 57, 58, 59],
            calib_runs: [stint_layout::Calibration { pair_ticks: 60, batches: 61, ..Default::default() }; 4],
        };
        assert_eq!(FileHeader::parse(h.as_bytes(), u64::MAX), Ok(h));

        let c = ColumnHeader {
            self_addr: 1,
            owner_tp: 2,
            owner_key: 3,
            tid: 4,
            index: 5,
            state: 6,
            pid: 7,
            first_point: 8,
            registered_monotonic_ns: 9,
            start_routine: 10,
            name: *b"0123456789abcdef",
            seq_ptr: 11,
            cpu_off: 12,
            seq: 13,
            seq_never: 14,
            busy: 15,
            depth: 16,
            clock_source: 17,
            _pad0: 0,
            timer_skipped: 18,
            unmatched_exits: 19,
            abandoned_frames: 20,
            shadow_overflow: 21,
            resyncs: 22,
            creator_tid: 23,
            exit_kind: 24,
            exit_value: 25,
            end_monotonic_ns: 26,
            thread_state: 27,
            state_object: 28,
            state_since: 29,
            state_ticks: [30, 31, 32, 33, 34, 35, 36, 37],
            last_tsc: 38,
            ring_head: 39,
            wrap_skipped: 40,
            n_held: 41,
            in_wrap: 0,
            sync_tsc: 42,
            sync_ticks: 43,
            thread_mask: 44,
            exit_key: 45,
            req_seen: 46,
            snap_seq: 47,
            snap_tsc: 48,
            cct_mask: 49,
            cct_nodes: 50,
            cct_lost: 51,
            cct_ready: 52,
            cct_wraps_ready: 0,
            perf_base_ns: 53,
            sched_cpu_ns: 53,
            sched_runq_ns: 54,
            sched_read: 1,
            _pad_sched: 0,
            shadow_ready: 55,
            lazy_ready: 56,
            lock_cache: 57,
            cct_slow_ready: 0,
            _pad_slow: 0,
            rseq_cs: 58,
            owner_tpx: 59,
            signal_cache: 60,
        };
        assert_eq!(ColumnHeader::parse(c.as_bytes()), Ok(c));

        let o = SyncObject { address: 1, first_pc: 2, kind: 3, first_tid: 4, next: 5, _pad: 0 };
        let mut b = sample();
        put_object(&mut b, 7, &o);
        let h = FileHeader::parse(&b, b.len() as u64).unwrap();
        assert_eq!((SyncObject::parse(&b, &h, 7), h.n_objects), (Some(o), 8));
        let w = WaitEntry {
            object: 1,
            kind: 2,
            count: 3,
            contended: 4,
            wait_ticks: 5,
            hold_ticks: 6,
            longest_ticks: 7,
            longest_pc: 8,
        };
        put_wait(&mut b, 1, 200, &w);
        let t = Transition { tsc: 1, state: 2, object: 3 };
        put_transition(&mut b, 1, 300, &t);
        let col = &b[h.column_range(1)];
        assert_eq!(WaitEntry::parse(col, 200), Some(w));
        assert_eq!(Transition::parse(col, 300 % RING_CAP), Some(t));
        assert_eq!(ColumnHeader::parse(col).unwrap().ring_head, 301);
    }

    #[test]
    fn synthetic_file_has_the_runtime_layout() {
        let b = sample();
        let h = FileHeader::parse(&b, b.len() as u64).unwrap();
        assert_eq!(
            (h.control_offset, h.ctl_offset),
            (stint_layout::HEADER_RESERVED, stint_layout::HEADER_RESERVED + PAGE)
        );
        assert_eq!(h.meta_offset, h.ctl_offset + ctl_len(5));
        assert_eq!(h.columns_offset % PAGE, 0);
        assert_eq!(h.column_size, column_size(5, N_COUNTER_SLOTS));
        assert_eq!((h.n_columns, h.capacity_columns), (3, 16));
        assert_eq!(h.file_len, b.len() as u64);
        let many: Vec<_> = (0..17).map(|t| (1000 + t, vec![])).collect();
        let b = write_synthetic(&meta5(), &many);
        assert_eq!(FileHeader::parse(&b, b.len() as u64).unwrap().capacity_columns, 32);
    }

    #[test]
    fn loads_what_was_written() {
        let f = TempFile::new("load", &sample());
        let p = load(&f.0).unwrap();
        assert_eq!(p.program, "pigz");
        assert_eq!(p.input.as_deref(), Some("/usr/bin/pigz"));
        assert_eq!((p.pid, p.ppid, p.flags), (100, 1, FLAG_TID_KEY_VERIFIED));
        assert!(!p.fork_child());
        assert_eq!((p.start_realtime_ns, p.skipped_reentrant, p.lost_threads), (SYNTHETIC_REALTIME_NS, 0, 0));
        assert_eq!(
            p.metrics,
            vec![MetricMeta { name: "calls".into(), kind: "counter".into(), slot: Some(0), bit: None, unit: None }]
        );
        assert_eq!(p.points.len(), 5);
        assert_eq!(p.points[4].function, "mid");
        assert_eq!(p.points[4].address_value(), Some(0x11c0));
        let t: Vec<_> = p.threads.iter().map(|t| (t.index, t.tid, t.pid, t.first_point, t.counts.clone())).collect();
        assert_eq!(
            t,
            vec![
                (0, 100, 100, Some(0), vec![(0, 1), (2, 3)]),
                (1, 101, 100, Some(1), vec![(1, 1), (2, 1000), (3, 500)]),
                (2, 102, 100, None, vec![]),
            ]
        );
        assert!(p.threads[0].is_main(&p) && !p.threads[1].is_main(&p));
        assert_eq!((p.threads[1].name.clone(), p.threads[1].start_routine), (None, None));
        assert_eq!(p.threads[1].registered_monotonic_ns, SYNTHETIC_MONOTONIC_NS + 2000);
        assert_eq!(p.total_calls(), 1505);
    }

    #[test]
    fn names_start_routines_flags_and_empty_columns() {
        let mut b = sample();
        patch_column(&mut b, 1, |c| {
            c.name[..8].copy_from_slice(b"compress");
            c.start_routine = 0x1189;
        });
        patch_column(&mut b, 2, |c| c.state = COLUMN_EMPTY);
        patch_header(&mut b, |h| {
            h.flags |= FLAG_FORK_CHILD;
            h.skipped_reentrant = 3;
            h.lost_threads = 2;
        });
        let p = parse(&b).unwrap();
        assert_eq!(p.threads.len(), 2);
        assert_eq!(p.threads[1].name.as_deref(), Some("compress"));
        assert_eq!(p.threads[1].start_routine, Some(0x1189));
        assert!(p.fork_child());
        assert_eq!((p.skipped_reentrant, p.lost_threads), (3, 2));
        // Full 16-byte names carry no NUL.
        patch_column(&mut b, 0, |c| c.name = *b"0123456789abcdef");
        assert_eq!(parse(&b).unwrap().threads[0].name.as_deref(), Some("0123456789abcdef"));
    }

    #[test]
    fn serde_round_trip() {
        let p = parse(&sample()).unwrap();
        let back: Profile = serde_json::from_str(&serde_json::to_string(&p).unwrap()).unwrap();
        assert_eq!(back, p);
    }

    #[test]
    fn missing_file_is_an_error() {
        let e = load(Path::new("/nonexistent/stint/profile")).unwrap_err();
        assert!(e.to_string().starts_with("cannot read: "), "{e}");
    }

    #[test]
    fn truncated_files() {
        let b = sample();
        assert_eq!(err(&[]), "file is truncated");
        assert_eq!(err(&b[..10]), "file is truncated");
        let h = FileHeader::parse(&b, b.len() as u64).unwrap();
        let mid_columns = h.columns_offset as usize + h.column_size as usize + 100;
        assert_eq!(err(&b[..mid_columns]), "file is truncated");
        assert_eq!(err(&b[..h.meta_offset as usize + 3]), "file is truncated");
    }

    #[test]
    fn bad_magic_and_version() {
        let mut b = sample();
        b[0] ^= 0xff;
        assert_eq!(err(&b), "not a stint profile (bad magic)");
        let mut b = sample();
        patch_header(&mut b, |h| h.version = 1);
        assert_eq!(err(&b), format!("profile layout version 1 is not supported (this stint reads {FILE_VERSION})"));
        assert_eq!(err(&vec![0u8; 8192]), "not a stint profile (bad magic)");
    }

    #[test]
    fn bad_meta() {
        let b = write_synthetic("{not json", &[]);
        assert_eq!(err(&b), "meta: invalid JSON at line 1 column 2: key must be a string");
        let b = write_synthetic(r#"{"schema":"stint-meta/1","program":"x","metrics":[]"#, &[]);
        assert_eq!(err(&b), "meta: invalid JSON at line 1 column 51: EOF while parsing an object");
        let b = write_synthetic(r#"{"schema":"stint-meta/1","program":"x","metrics":[]}"#, &[]);
        assert_eq!(err(&b), "meta: missing field `points` at line 1 column 52");
        let b = write_synthetic(&meta5().replace("stint-meta/1", "stint-meta/9"), &[]);
        assert_eq!(err(&b), "meta: schema \"stint-meta/9\" is not supported (this stint reads stint-meta/1)");
        let b = write_synthetic(&meta5().replace("\"id\":3", "\"id\":7"), &[]);
        assert_eq!(err(&b), "meta: point at index 3 has id 7");
        let b = write_synthetic(&meta5().replace("\"slot\":0", "\"slot\":11"), &[]);
        assert_eq!(
            err(&b),
            format!("meta: metric calls uses counter slot 11, but columns have {N_COUNTER_SLOTS} slots")
        );
    }

    /// Each point is compensated with the calibration of its kind of trampoline: separate
    /// entry and exit, entry+exit (meta `entry_exit`), a call into an import; a runtime that
    /// did not measure a kind (0) leaves the separate trampolines' figures standing in.
    #[test]
    fn each_point_costs_what_its_trampolines_cost() {
        let c = Compensation {
            pair_ticks: 100,
            inner_ticks: 50,
            pair_ee_ticks: 90,
            inner_ee_ticks: 45,
            pair_import_ticks: 80,
            inner_import_ticks: 40,
            ..Compensation::default()
        };
        let point = |kind: &str, entry_exit: bool| PointMeta {
            id: 0,
            kind: kind.into(),
            function: "f".into(),
            address: "0x1000".into(),
            bits: stint_layout::TIMER_BITS,
            size: 0,
            tail_jumps_to: Vec::new(),
            entry_exit,
        };
        assert_eq!(c.cost(Some(&point(POINT_ENTRY, false))), (50, 100));
        assert_eq!(c.cost(Some(&point(POINT_ENTRY, true))), (45, 90));
        assert_eq!(c.cost(Some(&point(stint_layout::meta::POINT_IMPORT, false))), (40, 80));
        assert_eq!(c.cost(None), (50, 100), "a point the meta does not describe");
        let old = Compensation { pair_ee_ticks: 0, pair_import_ticks: 0, ..c };
        assert_eq!(old.cost(Some(&point(POINT_ENTRY, true))), (50, 100));
        assert_eq!(old.cost(Some(&point(stint_layout::meta::POINT_IMPORT, false))), (50, 100));
    }

    /// main → leaf × `calls` with the leaf's time per call `per_call` ticks (CPU; wall 10 %
    /// more), calibrated at 200 ticks a pair, 100 inside, and compensated.
    fn leaf_calls_profile(calls: u64, per_call: u64) -> Profile {
        let mut p = leaf_calls_raw(calls, per_call);
        compensate(&mut p);
        p
    }

    /// [`leaf_calls_profile`] before [`compensate`], with the flat times its tree gives.
    fn leaf_calls_raw(calls: u64, per_call: u64) -> Profile {
        let meta = synthetic_meta("cap", &[("main", "0x10"), ("leaf", "0x20")]);
        let n = |parent: Option<u32>, point, calls, cpu: u64| SyntheticNode {
            parent,
            point,
            calls,
            cpu,
            wall: cpu * 11 / 10,
        };
        let tree = vec![n(None, 0, 1, 100_000), n(Some(0), 1, calls, calls * per_call)];
        let mut p = parse(&write_synthetic_with_trees(&meta, &[(7, vec![(0, 1), (1, calls)], tree, 0)])).unwrap();
        let s = stint_layout::CALIB_SCALE;
        p.compensation = Compensation {
            pair_ticks: 200 * s,
            inner_ticks: 100 * s,
            pair_flat_ticks: 200 * s,
            ..Compensation::default()
        };
        p.threads[0].times = p.threads[0].calltree.iter().map(|n| (n.point, n.cpu_ticks, n.wall_ticks)).collect();
        p
    }

    fn leaf_profile(per_call: u64) -> Profile {
        leaf_calls_profile(100, per_call)
    }

    /// The wrapper figures, measured beside the start-up run only, follow the timed call's
    /// least run: a start-up window slowed as a whole (timed call 240 against 180 later)
    /// scales them by 180/240; a start-up run that is the least leaves them alone.
    #[test]
    fn a_slowed_start_up_scales_the_wrapper_figures_with_it() {
        let run = |pair_ticks| CalibrationRun { pair_ticks, ..CalibrationRun::default() };
        let c = Compensation {
            pair_ticks: 180,
            wrap_event_ticks: 200,
            wrap_slow_ticks: 400,
            runs: vec![run(240), run(180)],
            ..Compensation::default()
        };
        let w = c.wrappers_at_the_least_run();
        assert_eq!((w.wrap_event_ticks, w.wrap_slow_ticks, w.pair_ticks), (150, 300, 180));
        let c = Compensation { runs: vec![run(180), run(240)], ..c };
        let w = c.wrappers_at_the_least_run();
        assert_eq!((w.wrap_event_ticks, w.wrap_slow_ticks), (200, 400));
        let c = Compensation { runs: vec![run(240)], ..c };
        assert_eq!(c.wrappers_at_the_least_run().wrap_event_ticks, 200, "one run: nothing to compare");
    }

    /// A calibration above what a leaf's own calls show (spoiled by a busy host) is scaled
    /// down to the leaf's time per call, every figure by the same factor, and said so: the
    /// leaf's CPU time goes to 0 without a clamp, its caller loses the scaled pair per call.
    #[test]
    fn a_calibration_a_leaf_contradicts_is_capped_to_it() {
        let p = leaf_profile(50);
        let s = stint_layout::CALIB_SCALE;
        let c = &p.compensation;
        assert_eq!(c.capped, Some(Capped { point: 1, per_call_ticks: 50 * s, factor_ppm: 500_000 }));
        assert_eq!((c.pair_ticks, c.inner_ticks, c.pair_flat_ticks), (100 * s, 50 * s, 100 * s));
        assert_eq!(c.clamped, 0);
        let t = &p.threads[0].calltree;
        assert_eq!((t[1].cpu_ticks, t[1].wall_ticks), (0, 500));
        assert_eq!(t[0].cpu_ticks, 100_000 - 50 - 100 * 100, "main: its own inner and the leaf's pairs");
    }

    /// A leaf slower than the calibrated inner part leaves the calibration as it is.
    #[test]
    fn a_calibration_the_leaves_allow_is_not_capped() {
        let p = leaf_profile(150);
        let s = stint_layout::CALIB_SCALE;
        let c = &p.compensation;
        assert_eq!(c.capped, None);
        assert_eq!((c.pair_ticks, c.inner_ticks), (200 * s, 100 * s));
        assert_eq!(p.threads[0].calltree[1].cpu_ticks, 100 * 150 - 100 * 100);
    }

    /// A leaf whose CPU and wall time the calibration takes to 0 (99 calls of 50 ticks, 100
    /// inside each timer) is listed as compensated to zero: the table shows a time of 0 for
    /// it, never `open` (a call that never returned), which is what a zero time meant before.
    #[test]
    fn a_time_compensated_to_zero_is_shown_as_zero_not_open() {
        let mut p = leaf_calls_raw(99, 50);
        // Timed points with both timer metrics, as the rewriter writes them.
        for m in [stint_layout::Metric::CpuTime, stint_layout::Metric::WallTime] {
            p.metrics.push(stint_layout::meta::MetricMeta::of(m.def()));
        }
        for pm in &mut p.points {
            pm.bits |= stint_layout::TIMER_BITS;
        }
        let raw_table = crate::report::to_table(&p);
        compensate(&mut p);
        let t = &p.threads[0];
        assert_eq!(t.times.iter().find(|x| x.0 == 1).map(|x| (x.1, x.2)), Some((0, 0)), "{:?}", t.times);
        assert_eq!(t.compensated_to_zero, vec![1]);
        let rows = crate::report::functions(&p, t);
        let leaf = rows.iter().find(|f| f.name == "leaf").expect("leaf row");
        assert_eq!(leaf.timing, crate::report::Timing::Timed);
        let table = crate::report::to_table(&p);
        assert!(!table.contains("open"), "{table}");
        // Raw (not compensated): nothing is listed, and the leaf has its measured time.
        assert!(leaf_calls_raw(99, 50).threads[0].compensated_to_zero.is_empty());
        assert!(!raw_table.contains("open"), "{raw_table}");
    }

    /// A leaf of fewer than 100 calls bounds nothing (one short span's CPU clock can be
    /// behind its extrapolation).
    #[test]
    fn a_leaf_of_few_calls_does_not_cap() {
        assert_eq!(leaf_calls_profile(99, 50).compensation.capped, None);
    }

    /// A leaf a little faster than the calibrated inner part (within 10 %: a warm call, not a
    /// spoiled calibration) leaves the figures as they are, and the clamps count the rest;
    /// below 90 % the guard acts.
    #[test]
    fn a_calibration_within_10_percent_of_a_leaf_is_not_capped() {
        assert_eq!(leaf_profile(95).compensation.capped, None);
        assert_eq!(leaf_profile(89).compensation.capped.map(|k| k.factor_ppm), Some(890_000));
    }

    /// The meta as the rewriter writes it (`Meta::new`: every metric, lock metrics without a
    /// counter slot, bits and sizes) reads back, and its counters come from the calls slot.
    #[test]
    fn reads_the_rewriters_meta() {
        let points = vec![PointMeta {
            id: 0,
            kind: POINT_ENTRY.into(),
            function: "main".into(),
            address: "0x1139".into(),
            bits: stint_layout::TIMER_BITS | 1,
            size: 40,
            tail_jumps_to: Vec::new(),
            entry_exit: false,
        }];
        let meta = serde_json::to_string(&stint_layout::meta::Meta::new("prog", points.clone())).unwrap();
        let p = parse_with(&write_synthetic(&meta, &[(100, vec![(0, 9)])]), &Observer::ENDED).unwrap();
        assert_eq!((p.program.as_str(), p.input.as_deref()), ("prog", None));
        assert_eq!(p.points, points);
        let names: Vec<_> = p.metrics.iter().map(|m| (m.name.as_str(), m.slot)).collect();
        assert_eq!(
            names,
            [
                ("calls", Some(0)),
                ("cpu_time", Some(1)),
                ("wall_time", Some(2)),
                ("lock_wait", None),
                ("lock_hold", None),
                ("state_trace", None)
            ]
        );
        assert_eq!(p.threads[0].counts, vec![(0, 9)]);
        let no_slot = meta.replacen(r#""slot":0,"#, "", 1);
        let b = write_synthetic(&no_slot, &[]);
        assert_eq!(err(&b), "meta: metric calls has no counter slot");
    }

    #[test]
    fn meta_point_count_mismatch() {
        let mut b = sample();
        patch_header(&mut b, |h| h.n_points = 4);
        assert_eq!(err(&b), "meta: 5 points, but the header says 4");
    }

    #[test]
    fn header_contradictions() {
        let mut b = sample();
        patch_header(&mut b, |h| h.n_columns = h.capacity_columns + 1);
        assert_eq!(err(&b), "corrupt header: more columns than capacity");
        let mut b = sample();
        patch_header(&mut b, |h| {
            h.n_points = u32::MAX;
            h.n_counter_slots = u32::MAX;
        });
        assert_eq!(err(&b), "corrupt header: points times counter slots overflows the column size");
    }

    #[test]
    fn corrupt_columns() {
        let mut b = sample();
        patch_column(&mut b, 2, |c| c.first_point = 7);
        assert_eq!(err(&b), "point 7 in column 2 is out of range (the file has 5 points)");
        let mut b = sample();
        patch_column(&mut b, 1, |c| c.index = 5);
        assert_eq!(err(&b), "column 1 says it is column 5");
    }

    #[test]
    fn no_calls_metric_means_no_counts() {
        let meta = meta5().replace("\"name\":\"calls\"", "\"name\":\"other\"");
        let p = parse(&write_synthetic(&meta, &[(100, vec![(0, 1)])])).unwrap();
        assert_eq!(p.threads[0].counts, vec![]);
    }

    /// Flip every byte of the header page, the meta, the first column header, the first
    /// objects, wait entries and ring entries in turn: each result loads or fails, and what
    /// loads renders.
    #[test]
    fn flipped_bytes_never_panic() {
        let good = with_locks(sample());
        let h = FileHeader::parse(&good, good.len() as u64).unwrap();
        let meta = h.meta_offset as usize..(h.meta_offset + h.meta_len) as usize;
        let col = h.columns_offset as usize..h.columns_offset as usize + stint_layout::COLUMN_HEADER_RESERVED as usize;
        let objects_start = h.objects_offset as usize + h.obj_buckets as usize * size_of::<ObjBucket>();
        let objects = objects_start..objects_start + 3 * size_of::<SyncObject>();
        let col1 = h.column_range(1).start;
        let waits = col1 + WAITS_OFFSET as usize..col1 + WAITS_OFFSET as usize + 2 * size_of::<WaitEntry>();
        let ring = col1 + RING_OFFSET as usize..col1 + RING_OFFSET as usize + 2 * size_of::<Transition>();
        let mut b = good.clone();
        for i in (0..512).chain(meta).chain(col).chain(objects).chain(waits).chain(ring) {
            for flip in [0xff, 0x01, 0x80] {
                b[i] ^= flip;
                let obs = if i % 2 == 0 { Observer::ENDED } else { ALIVE_AT_5000 };
                if let Ok(p) = parse_with(&b, &obs) {
                    let _ = crate::report::to_json(&p);
                    let _ = crate::report::to_table(&p);
                    let _ = crate::report::to_lock_table(&p);
                    let _ = crate::report::to_thread_table(&p);
                }
                b[i] ^= flip;
            }
        }
        assert_eq!(b, good);
    }

    /// Every process and thread runs, and the TSC reads `SYNTHETIC_START_TSC + 5000`.
    const ALIVE_AT_5000: Observer = Observer {
        thread_alive: |_, _| true,
        process_alive: |_| true,
        now_tsc: || SYNTHETIC_START_TSC + 5000,
        thread_cpu_ns: |_, _| None,
        thread_sched_ns: |_, _| None,
    };

    const T0: u64 = SYNTHETIC_START_TSC;

    /// `sample()` plus two objects (a mutex and a condvar); thread 101 waited on both and is
    /// blocked on the condvar since T0 + 1000; thread 100 is running, its last event at
    /// T0 + 3000; thread 102 exited.
    fn with_locks(mut b: Vec<u8>) -> Vec<u8> {
        put_object(
            &mut b,
            0,
            &SyncObject { address: 0x5000, first_pc: 0x11d0, kind: OBJ_MUTEX, first_tid: 101, ..Default::default() },
        );
        put_object(
            &mut b,
            1,
            &SyncObject { address: 0x5040, first_pc: 0, kind: OBJ_CONDVAR, first_tid: 101, ..Default::default() },
        );
        let mutex = WaitEntry {
            object: 1,
            kind: OBJ_MUTEX,
            count: 10,
            contended: 3,
            wait_ticks: 700,
            hold_ticks: 90,
            ..Default::default()
        };
        put_wait(&mut b, 1, 0, &mutex);
        put_wait(&mut b, 1, 5, &WaitEntry { object: 2, kind: OBJ_CONDVAR, count: 2, wait_ticks: 400, ..mutex });
        put_transition(&mut b, 1, 0, &Transition { tsc: T0 + 500, state: STATE_BLOCKED_MUTEX, object: 0 });
        put_transition(&mut b, 1, 1, &Transition { tsc: T0 + 600, state: STATE_RUN, object: u32::MAX });
        put_transition(&mut b, 1, 2, &Transition { tsc: T0 + 1000, state: STATE_BLOCKED_CONDVAR, object: 1 });
        patch_column(&mut b, 1, |c| {
            c.creator_tid = 100;
            c.thread_state = STATE_BLOCKED_CONDVAR;
            c.state_object = 1;
            c.state_since = T0 + 1000;
            c.state_ticks[STATE_RUN as usize] = 900;
            c.state_ticks[STATE_BLOCKED_MUTEX as usize] = 100;
            c.last_tsc = T0 + 1000;
            c.wrap_skipped = 1;
        });
        patch_column(&mut b, 0, |c| {
            c.state_since = T0 + 10;
            c.state_ticks[STATE_RUN as usize] = 10;
            c.last_tsc = T0 + 3000;
        });
        patch_column(&mut b, 2, |c| {
            c.thread_state = STATE_EXITED;
            c.state_since = T0 + 2000;
            c.state_ticks[STATE_RUN as usize] = 1500;
            c.last_tsc = T0 + 2000;
            c.exit_kind = EXIT_RETURNED;
            c.exit_value = 7;
            c.end_monotonic_ns = SYNTHETIC_MONOTONIC_NS + 2500;
        });
        b
    }

    #[test]
    fn reads_objects_waits_records_and_transitions() {
        let p = parse_with(&with_locks(sample()), &Observer::ENDED).unwrap();
        assert!(p.warnings.is_empty(), "{:?}", p.warnings);
        assert_eq!((p.start_tsc, p.objects_lost, p.alive), (T0, 0, false));
        assert_eq!(
            p.objects,
            vec![
                ObjectProfile {
                    index: 0,
                    address: 0x5000,
                    first_pc: 0x11d0,
                    kind: OBJ_MUTEX,
                    first_tid: 101,
                    symbol: None
                },
                ObjectProfile {
                    index: 1,
                    address: 0x5040,
                    first_pc: 0,
                    kind: OBJ_CONDVAR,
                    first_tid: 101,
                    symbol: None
                },
            ]
        );
        assert_eq!(p.object(1).map(|o| o.kind_name()), Some("condvar"));
        let t = &p.threads[1];
        assert_eq!(
            t.waits,
            vec![
                WaitProfile {
                    object: 0,
                    kind: OBJ_MUTEX,
                    count: 10,
                    contended: 3,
                    wait_ticks: 700,
                    hold_ticks: 90,
                    longest_ticks: 0,
                    longest_pc: 0
                },
                WaitProfile {
                    object: 1,
                    kind: OBJ_CONDVAR,
                    count: 2,
                    contended: 3,
                    wait_ticks: 400,
                    hold_ticks: 90,
                    longest_ticks: 0,
                    longest_pc: 0
                },
            ]
        );
        assert_eq!((t.creator_tid, t.state_object, t.wrap_skipped, t.ring_head), (Some(100), Some(1), 1, 3));
        assert_eq!(
            t.transitions,
            vec![
                TransitionProfile { tsc: T0 + 500, state: STATE_BLOCKED_MUTEX, object: Some(0) },
                TransitionProfile { tsc: T0 + 600, state: STATE_RUN, object: None },
                TransitionProfile { tsc: T0 + 1000, state: STATE_BLOCKED_CONDVAR, object: Some(1) },
            ]
        );
        // Ended unseen: the open interval ends at the last event, which is when it started.
        assert_eq!(t.state_ticks[..3], [900, 100, 0]);
        // Main: RUN since T0 + 10, last event at T0 + 3000.
        assert_eq!(p.threads[0].state_ticks[0], 10 + 2990);
        assert_eq!((p.threads[0].creator_tid, p.threads[0].exit_kind, p.threads[0].end_monotonic_ns), (None, 0, None));
        // Exited: no open interval.
        let t2 = &p.threads[2];
        assert_eq!((t2.state_ticks[0], t2.exit_kind, t2.exit_value), (1500, EXIT_RETURNED, 7));
        assert_eq!(t2.end_monotonic_ns, Some(SYNTHETIC_MONOTONIC_NS + 2500));
        assert!(p.threads.iter().all(|t| !t.alive));
    }

    #[test]
    fn open_interval_of_running_threads_ends_now() {
        let p = parse_with(&with_locks(sample()), &ALIVE_AT_5000).unwrap();
        assert!(p.alive);
        assert_eq!(p.threads.iter().map(|t| t.alive).collect::<Vec<_>>(), [true, true, false]);
        assert_eq!(p.threads[0].state_ticks[0], 10 + 4990);
        assert_eq!(p.threads[1].state_ticks[STATE_BLOCKED_CONDVAR as usize], 4000);
        assert_eq!(p.threads[2].state_ticks[0], 1500);
        // A thread that is gone from a live process ends at its last event.
        let gone = Observer { thread_alive: |_, tid| tid != 101, ..ALIVE_AT_5000 };
        let p = parse_with(&with_locks(sample()), &gone).unwrap();
        assert_eq!(p.threads[1].state_ticks[STATE_BLOCKED_CONDVAR as usize], 0);
        // A TSC behind the state's start (another machine, or a recycled pid) adds nothing.
        let early = Observer { now_tsc: || 5, ..ALIVE_AT_5000 };
        assert_eq!(parse_with(&with_locks(sample()), &early).unwrap().threads[0].state_ticks[0], 10);
        // No state record (no wrapper event, state_since 0): no open interval at all.
        assert_eq!(parse_with(&sample(), &ALIVE_AT_5000).unwrap().threads[0].state_ticks, [0; 8]);
    }

    #[test]
    fn the_system_observer_sees_this_process() {
        assert!(system_process_alive(std::process::id()));
        assert!(system_thread_alive(std::process::id(), std::process::id()));
        assert!(!system_process_alive(0) && !system_thread_alive(std::process::id(), 0));
        assert!(!system_process_alive(u32::MAX));
        let a = system_tsc();
        assert!(system_tsc() >= a);
    }

    #[test]
    fn function_at_uses_sizes_and_skips_wrappers() {
        let meta = synthetic_meta_points(
            "p",
            &[
                ("entry", "main", "0x1000", 0x40),
                ("entry", "helper", "0x1100", 0),
                ("wrap", "pthread_mutex_lock", "0x1040", 0),
                ("entry", "main_alias", "0x1000", 0),
            ],
        );
        let p = parse_with(&write_synthetic(&meta, &[]), &Observer::ENDED).unwrap();
        let f = |pc| p.function_at(pc).map(|pm| pm.function.as_str());
        assert_eq!(f(0x1000), Some("main"));
        assert_eq!(f(0x103f), Some("main"));
        // Past main's end, and the wrapper point is no function: nothing.
        assert_eq!(f(0x1040), None);
        assert_eq!(f(0x10ff), None);
        // No size: the nearest entry at or below.
        assert_eq!(f(0x1100), Some("helper"));
        assert_eq!(f(0x9999), Some("helper"));
        assert_eq!(f(0xfff), None);
        assert_eq!(p.points[0].size, 0x40);
        assert_eq!(p.points[1].size, 0);
    }

    #[test]
    fn wait_entry_naming_a_missing_object_is_skipped_with_a_warning() {
        let mut b = with_locks(sample());
        // Object 5 is past n_objects (2) and its entry is empty; 9999 is past the table.
        let w = WaitEntry { object: 6, kind: OBJ_MUTEX, count: 1, ..Default::default() };
        put_wait(&mut b, 2, 3, &w);
        put_wait(&mut b, 2, 4, &WaitEntry { object: 10_000, ..w });
        put_wait(&mut b, 2, 5, &WaitEntry { object: u32::MAX, ..w });
        let p = parse_with(&b, &Observer::ENDED).unwrap();
        assert_eq!(p.threads[2].waits, vec![]);
        assert_eq!(
            p.warnings,
            [
                "thread 102: wait entry 3 names sync object 5, which the file does not record (2 objects, table of 64); skipped",
                "thread 102: wait entry 4 names sync object 9999, which the file does not record (2 objects, table of 64); skipped",
                "thread 102: wait entry 5 names sync object 4294967294, which the file does not record (2 objects, table of 64); skipped",
            ]
        );
        assert_eq!(p.objects.len(), 2);
        // An entry past the n_objects we saw but complete in our copy (a live file) is taken.
        let o = SyncObject { address: 0x6000, kind: OBJ_MUTEX, first_tid: 102, ..Default::default() };
        put_object(&mut b, 5, &o);
        patch_header(&mut b, |h| h.n_objects = 2);
        let p = parse_with(&b, &Observer::ENDED).unwrap();
        assert_eq!(p.warnings.len(), 2);
        assert_eq!(p.threads[2].waits.iter().map(|w| w.object).collect::<Vec<_>>(), [5]);
        assert_eq!(p.objects.iter().map(|o| o.index).collect::<Vec<_>>(), [0, 1, 5]);
    }

    #[test]
    fn corrupt_object_tables() {
        // More objects than the table holds: the table is read, nothing more.
        let mut b = with_locks(sample());
        patch_header(&mut b, |h| h.n_objects = u32::MAX);
        let p = parse_with(&b, &Observer::ENDED).unwrap();
        assert_eq!(p.objects.len(), 2);
        // A table past the end of the file, or whose end overflows.
        let mut b = with_locks(sample());
        patch_header(&mut b, |h| h.objects_offset = h.file_len - PAGE + 8);
        assert_eq!(err(&b), "file is truncated");
        let mut b = with_locks(sample());
        patch_header(&mut b, |h| h.objects_offset = u64::MAX - 10);
        assert_eq!(err(&b), "file is truncated");
        let mut b = with_locks(sample());
        patch_header(&mut b, |h| h.obj_cap = u32::MAX);
        assert_eq!(err(&b), "file is truncated");
        // Unknown kinds, states and exit kinds, a state object and ring beyond reason.
        let mut b = with_locks(sample());
        put_object(&mut b, 2, &SyncObject { address: 1, kind: 99, ..Default::default() });
        put_transition(&mut b, 2, 0, &Transition { tsc: 1, state: 1000, object: 77 });
        patch_column(&mut b, 1, |c| {
            c.thread_state = 12;
            c.state_object = 4000;
            c.exit_kind = 55;
            c.ring_head = u64::MAX;
            c.state_since = u64::MAX;
        });
        let p = parse_with(&b, &ALIVE_AT_5000).unwrap();
        assert_eq!(p.object(2).map(|o| o.kind_name()), Some("unknown"));
        assert_eq!(p.threads[1].state_object, None);
        assert_eq!(p.threads[1].transitions.len(), RING_CAP as usize);
        assert_eq!(p.threads[2].transitions, vec![TransitionProfile { tsc: 1, state: 1000, object: None }]);
        let j = crate::report::to_json(&p);
        assert_eq!(j["threads"][1]["state"], "unknown");
        assert_eq!(j["threads"][1]["exit"], "unknown");
        assert_eq!(j["threads"][2]["transitions"][0]["state"], "unknown");
    }
}

#[cfg(test)]
mod sampled_interval_tests {
    //! A sampled point's time between two readings (`stint top`'s interval): scaled by the
    //! interval's calls ÷ the interval's timed calls, not the difference of two whole-run
    //! estimates.
    use super::*;
    use crate::synthetic::write_synthetic;
    use stint_layout::meta::{Meta, MetricMeta, PointMeta, META_SCHEMA, POINT_ENTRY};
    use stint_layout::{counter_offset, Metric, Pod, SAMPLE_LEARN, SAMPLE_ON, SAMPLE_UNIT, SLOT_ACTIVE, TIMER_BITS};

    /// One thread (tid 7) calling `tick` (point 0): `calls` calls, of which `timed` timed
    /// (`SAMPLE_LEARN` of them before the point was sampled), `cpu` ticks of CPU and wall,
    /// `learn` of them in the first `LEARN_CALLS` calls.
    fn reading(calls: u64, timed: u64, cpu: u64, learn: u64) -> Profile {
        reading_off(calls, timed, cpu, learn, 0)
    }

    /// [`reading`] whose timed calls after the decision also spent `off` wall ticks off a
    /// CPU, seen at their own exits (the runtime adds them to the wall and to its
    /// unscaled part, `SLOT_LEARN_WALL`).
    fn reading_off(calls: u64, timed: u64, cpu: u64, learn: u64, off: u64) -> Profile {
        let meta = Meta {
            schema: META_SCHEMA.into(),
            program: "app".into(),
            input: None,
            build_id: None,
            debuglink: None,
            metrics: [Metric::Calls, Metric::CpuTime, Metric::WallTime].map(|m| MetricMeta::of(m.def())).to_vec(),
            points: vec![PointMeta {
                id: 0,
                kind: POINT_ENTRY.into(),
                function: "tick".into(),
                address: "0x1000".into(),
                bits: metric_bit(0) | TIMER_BITS,
                size: 0,
                tail_jumps_to: Vec::new(),
                entry_exit: false,
            }],
            unwrapped: Vec::new(),
        };
        let mut b = write_synthetic(&serde_json::to_string(&meta).unwrap(), &[(7, vec![(0, calls)])]);
        let h = FileHeader::parse(&b, b.len() as u64).unwrap();
        let col = h.column_range(0).start;
        for (slot, v) in [
            (SLOT_CPU_TICKS, cpu),
            (SLOT_WALL_TICKS, cpu + off),
            (SLOT_ACTIVE, SAMPLE_ON | (calls * SAMPLE_UNIT)),
            (stint_layout::SLOT_SAMPLED_TIMED, timed - SAMPLE_LEARN),
            (stint_layout::SLOT_LEARN_CPU, learn),
            (stint_layout::SLOT_LEARN_WALL, learn + off),
        ] {
            v.write_to(&mut b, col + counter_offset(1, slot, 0) as usize).unwrap();
        }
        parse(&b).unwrap()
    }

    /// 511 learning calls of 100 ticks (cold), then 10,000 calls of 10 ticks (157 timed).
    fn first() -> Profile {
        reading(10_512, 668, 51_100 + 1_570, 51_100)
    }

    #[test]
    fn learning_calls_count_as_themselves_not_as_samples() {
        let a = first();
        let t = &a.threads[0];
        assert_eq!(t.sampled.len(), 1);
        let s = t.sampled[0];
        assert_eq!(
            (s.calls, s.timed, s.learn_calls, s.raw_cpu_ticks, s.learn_cpu_ticks),
            (10_512, 668, 511, 52_670, 51_100)
        );
        // 51,100 + 1,570 × 10,001 / 157; one ratio over all timed calls would say
        // 52,670 × 10,512 / 668 = 828,843: the 511 cold calls weighed as 32,000.
        assert_eq!(t.times, vec![(0, 151_110, 151_110)]);
    }

    #[test]
    fn an_interval_of_a_sampled_point_scales_by_its_own_timed_calls() {
        let a = first();
        // Then 64,000 calls of 20 ticks (1,000 timed).
        let b = reading(74_512, 1_668, 52_670 + 20_000, 51_100);
        let (ta, tb) = (&a.threads[0], &b.threads[0]);
        assert_eq!(interval_ticks(Some(ta), tb, 0), (1_280_000, 1_280_000), "20,000 × 64,000 / 1,000");
        // Not the difference of the two whole-run estimates.
        let whole = 51_100 + 21_570 * (74_512 - 511) / (1_668 - 511);
        assert_eq!(tb.times[0].1, whole);
        assert_ne!(whole - 151_110, 1_280_000);
        // A thread with no earlier reading: its whole run.
        assert_eq!(interval_ticks(None, ta, 0), (151_110, 151_110));
    }

    #[test]
    fn a_stall_seen_in_a_timed_call_counts_once_in_the_wall_estimate() {
        // As `first`, and one timed call was switched out for 1,000,000 ticks.
        let a = reading_off(10_512, 668, 51_100 + 1_570, 51_100, 1_000_000);
        let t = &a.threads[0];
        // CPU as before; wall: the stall once, not × 10,001 / 157.
        assert_eq!(t.times, vec![(0, 151_110, 1_151_110)]);
        assert_eq!(t.sampled[0].learn_wall_ticks, 51_100 + 1_000_000);
    }

    #[test]
    fn an_interval_counts_its_own_stalls_once() {
        let a = reading_off(10_512, 668, 52_670, 51_100, 1_000);
        // Then 64,000 calls of 20 ticks (1,000 timed), one of them 500,000 ticks off a CPU.
        let b = reading_off(74_512, 1_668, 52_670 + 20_000, 51_100, 1_000 + 500_000);
        assert_eq!(interval_ticks(Some(&a.threads[0]), &b.threads[0], 0), (1_280_000, 1_780_000));
    }
}
