//! Operations on the profile file of a running rewritten program (D10): switch metrics on and
//! off per function and per thread, post snapshot requests, switch sampling off and on (a
//! program rewritten with `--sampling`), and say what is on where.
//! `stint ctl` and the metric keys of `stint top` are thin callers of this module.
//!
//! Everything goes through the profile file the program maps `MAP_SHARED`: writing a gate
//! byte or a thread's mask with `pwrite` changes what the program's trampolines see at
//! their next event, without stopping it. What needs the program's cooperation (a
//! snapshot) is posted on the control page's requests ring; each thread handles it at its
//! next safe point (see `rt-lib/src/control.rs`). So does `sampling off|on`: the page's
//! `sampling_off` flag first, then a sampling request; each thread applies the flag to its
//! points' sampling states before its next entry is measured, and `req_seen` in its column
//! says that it has.
//!
//! The file is opened without following symbolic links; changing it needs the file to be a
//! regular file owned by the caller's uid and its process to run, and holds an exclusive
//! lock on it so two `stint ctl` do not interleave.
//!
//! # What "on" means
//! Metric m is measured at point p on thread t when bit m is set in p's gate byte (the
//! function focus) and in t's thread mask (the thread focus). `enable m --thread T` makes
//! T the only thread measuring m (or adds T when m already has a thread focus); `enable m`
//! without `--thread` measures m on every thread, present and future. A frame that is open
//! when its timers go off is still closed at its exit; an exit whose entry was not measured
//! is ignored.

use std::fmt;
use std::fs::File;
use std::mem::{offset_of, size_of};
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use stint_layout::control_file::glob_match;
use stint_layout::{
    metric_bit, metric_id, ColumnHeader, Control, FileHeader, FormatError, Request, FILE_MAGIC, FLAG_SAMPLING,
    KEY_POKE, METRIC_NAMES, N_METRICS, REQ_CAP, REQ_SAMPLING, REQ_SNAPSHOT,
};
use thiserror::Error;

use crate::profile::{self, ControlInfo, Profile, ProfileError, ThreadProfile};

/// Why a control operation failed. Every message is one line that starts with its subject
/// (the profile file, or the argument at fault).
#[derive(Debug, Error)]
pub enum CtlError {
    /// A metric name that is neither a metric nor `all`.
    #[error("unknown metric '{name}' (known: {}, all)", METRIC_NAMES.join(", "))]
    UnknownMetric { name: String },
    /// `disable` was given both a function and a thread focus.
    #[error("disable takes --function or --thread, not both (a metric's thread focus covers all its functions)")]
    DisableBoth,
    /// The path is a symbolic link (never followed).
    #[error("{path}: is a symbolic link; give the profile file itself")]
    Symlink { path: String },
    /// The file could not be opened, inspected or read.
    #[error("{path}: {error}")]
    Io { path: String, error: std::io::Error },
    /// The path is not a regular file.
    #[error("{path}: not a regular file")]
    NotRegular { path: String },
    /// The file belongs to another user.
    #[error("{path}: owned by uid {uid}, not by you; only the owner controls a program")]
    NotOwner { path: String, uid: u32 },
    /// The exclusive lock could not be taken.
    #[error("{path}: cannot lock: {error}")]
    Lock { path: String, error: std::io::Error },
    /// The file does not start with the profile magic.
    #[error("{path}: not a stint profile (bad magic)")]
    NotProfile { path: String },
    /// The header is unusable.
    #[error("{path}: {error}")]
    Format { path: String, error: FormatError },
    /// The file does not read as a profile.
    #[error("{path}: {error}")]
    Profile { path: String, error: ProfileError },
    /// The process has ended: there is nothing to control.
    #[error("{path}: process {pid} is not running; its profile is final")]
    Ended { path: String, pid: u32 },
    /// A write to the file failed.
    #[error("{path}: cannot write: {error}")]
    Write { path: String, error: std::io::Error },
    /// No point of the program can measure the metric.
    #[error("{path}: {metric} is not built into this program (rewrite it with a spec that has it)")]
    NotBuiltIn { path: String, metric: &'static str },
    /// The function globs match no point that can measure the metric.
    #[error("{path}: no function matches {globs} for {metric}")]
    NoFunction { path: String, globs: String, metric: &'static str },
    /// `sampling off|on` for a program rewritten without sampling.
    #[error("{path}: rewritten without --sampling; every call is timed and there is no sampling to switch")]
    NoSampling { path: String },
    /// A tid that is not a live thread of the process.
    #[error("{path}: {tid} is not a live thread of pid {pid} (threads: {live})")]
    NoThread { path: String, tid: u32, pid: u32, live: String },
}

/// The metric ids named by `names` (metric names or `all`), in order.
pub fn metric_ids(names: &[String]) -> Result<Vec<u32>, CtlError> {
    let mut metrics = Vec::new();
    for m in names {
        if m == "all" {
            metrics.extend(0..N_METRICS);
        } else {
            metrics.push(metric_id(m.as_bytes()).ok_or_else(|| CtlError::UnknownMetric { name: m.clone() })?);
        }
    }
    Ok(metrics)
}

/// What `enable` / `disable` act on: metrics, and optionally functions (globs) and threads.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Focus {
    /// Metric ids (`stint_layout::METRIC_*`).
    pub metrics: Vec<u32>,
    /// Turn them on (true) or off.
    pub on: bool,
    /// Only functions whose name matches one of these globs (`*`, `?`); all if empty.
    pub functions: Vec<String>,
    /// Only these threads (kernel tids); see the module doc for what that means.
    pub threads: Vec<u32>,
}

impl Focus {
    /// Check the arguments of `enable` / `disable` before any file is touched.
    pub fn new(metrics: &[String], on: bool, functions: Vec<String>, threads: Vec<u32>) -> Result<Focus, CtlError> {
        let metrics = metric_ids(metrics)?;
        if !on && !functions.is_empty() && !threads.is_empty() {
            return Err(CtlError::DisableBoth);
        }
        Ok(Focus { metrics, on, functions, threads })
    }

    /// One selection per metric, in the order given.
    pub fn selections(&self) -> impl Iterator<Item = Selection<'_>> {
        self.metrics.iter().map(|&metric| Selection {
            metric,
            on: self.on,
            functions: &self.functions,
            threads: &self.threads,
        })
    }
}

/// One metric switched on or off, for some functions and threads.
#[derive(Clone, Copy, Debug)]
pub struct Selection<'a> {
    pub metric: u32,
    pub on: bool,
    pub functions: &'a [String],
    pub threads: &'a [u32],
}

/// One change to a running program's metrics (one function glob, one thread at most).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Change {
    /// Metric id (`stint_layout::METRIC_*`).
    pub metric: u32,
    /// Turn it on (true) or off.
    pub on: bool,
    /// Only the points whose function name matches this glob (`*`, `?`).
    pub function: Option<String>,
    /// Only this thread (kernel tid).
    pub thread: Option<u32>,
}

/// Apply `change` to the live profile at `path`; returns a one-line summary of what changed
/// ("cpu_time on at 12 points, thread 4247").
pub fn apply(path: &Path, change: &Change) -> Result<String, CtlError> {
    let live = LiveProfile::open(path, Access::Change)?;
    let functions: Vec<String> = change.function.iter().cloned().collect();
    let threads: Vec<u32> = change.thread.iter().copied().collect();
    live.apply(&Selection { metric: change.metric, on: change.on, functions: &functions, threads: &threads })
}

/// What the caller means to do with an opened profile.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// Only read it (status): any profile, of a running process or not.
    Read,
    /// Change it: our own file, of a running process, locked while open.
    Change,
}

/// An open profile file of a (normally) running process, read once.
pub struct LiveProfile {
    path: PathBuf,
    file: File,
    header: FileHeader,
    bytes: Vec<u8>,
    profile: Profile,
}

/// `O_NOFOLLOW` of x86-64 Linux.
const O_NOFOLLOW: i32 = 0o400000;
/// `ELOOP`: what `open` with `O_NOFOLLOW` says of a symbolic link.
const ELOOP: i32 = 40;

impl LiveProfile {
    /// Open the profile at `path` (never through a symbolic link) and read it.
    pub fn open(path: &Path, access: Access) -> Result<LiveProfile, CtlError> {
        let name = path.display().to_string();
        let write = access == Access::Change;
        let file = std::fs::OpenOptions::new().read(true).write(write).custom_flags(O_NOFOLLOW).open(path).map_err(
            |error| match error.raw_os_error() {
                Some(ELOOP) => CtlError::Symlink { path: name.clone() },
                _ => CtlError::Io { path: name.clone(), error },
            },
        )?;
        let meta = file.metadata().map_err(|error| CtlError::Io { path: name.clone(), error })?;
        if !meta.is_file() {
            return Err(CtlError::NotRegular { path: name });
        }
        if write {
            let me = std::fs::metadata("/proc/self").map(|m| m.uid()).unwrap_or(u32::MAX);
            if meta.uid() != me {
                return Err(CtlError::NotOwner { path: name, uid: meta.uid() });
            }
            file.lock().map_err(|error| CtlError::Lock { path: name.clone(), error })?;
        }
        let bytes = std::fs::read(path).map_err(|error| CtlError::Io { path: name.clone(), error })?;
        if bytes.get(..8) != Some(&FILE_MAGIC[..]) {
            return Err(CtlError::NotProfile { path: name });
        }
        let header = FileHeader::parse(&bytes, bytes.len() as u64)
            .map_err(|error| CtlError::Format { path: name.clone(), error })?;
        let profile = profile::parse(&bytes).map_err(|error| CtlError::Profile { path: name.clone(), error })?;
        if write && !profile.alive {
            return Err(CtlError::Ended { path: name, pid: profile.pid });
        }
        Ok(LiveProfile { path: path.to_path_buf(), file, header, bytes, profile })
    }

    /// The profile as read at `open`.
    pub fn profile(&self) -> &Profile {
        &self.profile
    }

    fn name(&self) -> String {
        self.path.display().to_string()
    }

    /// `len` bytes at `off` as the file holds them now (not as read at `open`): a command that
    /// changes several things reads each one after the previous change was written.
    fn read_now(&self, off: u64, len: usize) -> Result<Vec<u8>, CtlError> {
        let mut buf = vec![0u8; len];
        self.file.read_exact_at(&mut buf, off).map_err(|error| CtlError::Io { path: self.name(), error })?;
        Ok(buf)
    }

    /// The control page as the file holds it now.
    fn control_now(&self) -> Result<Control, CtlError> {
        let b = self.read_now(self.header.control_offset, size_of::<Control>())?;
        Control::parse(&b).map_err(|error| CtlError::Format { path: self.name(), error })
    }

    fn write_at(&self, off: u64, data: &[u8]) -> Result<(), CtlError> {
        self.file.write_all_at(data, off).map_err(|error| CtlError::Write { path: self.name(), error })
    }

    fn column_offset(&self, index: u32) -> u64 {
        self.header.columns_offset + index as u64 * self.header.column_size
    }

    fn column(&self, index: u32) -> Option<ColumnHeader> {
        ColumnHeader::parse(self.bytes.get(self.header.column_range(index))?).ok()
    }

    fn control(&self) -> Control {
        let off = self.header.control_offset as usize;
        self.bytes.get(off..off + size_of::<Control>()).and_then(|b| Control::parse(b).ok()).unwrap_or_default()
    }

    fn write_control_u32(&self, field: usize, v: u32) -> Result<(), CtlError> {
        self.write_at(self.header.control_offset + field as u64, &v.to_le_bytes())
    }

    fn write_control_u64(&self, field: usize, v: u64) -> Result<(), CtlError> {
        self.write_at(self.header.control_offset + field as u64, &v.to_le_bytes())
    }

    fn note_change(&self) -> Result<(), CtlError> {
        let c = self.control_now()?;
        self.write_control_u64(offset_of!(Control, changes), c.changes + 1)?;
        self.write_control_u64(offset_of!(Control, last_change_realtime_ns), profile::realtime_now_ns())
    }

    /// Points `sel` covers: those that can measure the metric and match a glob.
    fn points(&self, sel: &Selection) -> Vec<u32> {
        let bit = metric_bit(sel.metric);
        self.profile
            .points
            .iter()
            .filter(|p| p.bits & bit != 0)
            .filter(|p| {
                sel.functions.is_empty()
                    || sel.functions.iter().any(|g| glob_match(g.as_bytes(), p.function.as_bytes()))
            })
            .map(|p| p.id)
            .collect()
    }

    /// Switch one metric on or off for the selected functions and threads; returns a one-line
    /// summary of what changed ("cpu_time on at 12 points, thread 4247"). The profile must
    /// have been opened with [`Access::Change`].
    pub fn apply(&self, sel: &Selection) -> Result<String, CtlError> {
        let metric = METRIC_NAMES[sel.metric as usize];
        let bit = metric_bit(sel.metric);
        let capable = self.profile.points.iter().filter(|p| p.bits & bit != 0).count();
        if capable == 0 {
            return Err(CtlError::NotBuiltIn { path: self.name(), metric });
        }
        let points = self.points(sel);
        if points.is_empty() && (sel.on || sel.threads.is_empty()) {
            return Err(CtlError::NoFunction { path: self.name(), globs: sel.functions.join(", "), metric });
        }
        // The threads named must be live threads of the process.
        let live: Vec<&ThreadProfile> = self.profile.threads.iter().filter(|t| t.alive).collect();
        let mut named = Vec::new();
        for &tid in sel.threads {
            let cols: Vec<u32> = live.iter().filter(|t| t.tid == tid).map(|t| t.index).collect();
            if cols.is_empty() {
                let tids: Vec<String> = live.iter().map(|t| t.tid.to_string()).collect();
                return Err(CtlError::NoThread { path: self.name(), tid, pid: self.profile.pid, live: tids.join(" ") });
            }
            named.extend(cols);
        }
        // Everything below is read from the file as it is now, so the changes of one command
        // that names several metrics add up (each starts from what the previous one wrote).
        let control = self.control_now()?;
        let mask_off = offset_of!(ColumnHeader, thread_mask) as u64;
        let tpx_off = offset_of!(ColumnHeader, owner_tpx) as u64;
        let set_mask = |index: u32, f: &dyn Fn(u32) -> u32| -> Result<(), CtlError> {
            if self.column(index).is_some() {
                let at = self.column_offset(index) + mask_off;
                let now = self.read_now(at, size_of::<u32>())?;
                let mask = u32::from_le_bytes([now[0], now[1], now[2], now[3]]);
                self.write_at(at, &f(mask).to_le_bytes())?;
                // After the mask: its calls-only entries ask the runtime, which re-arms the
                // path (`ColumnHeader::owner_tpx`) only while the new mask counts calls.
                self.write_at(self.column_offset(index) + tpx_off, &0u64.to_le_bytes())?;
            }
            Ok(())
        };
        let b = bit as u32;
        // Gates: the function focus.
        let change_gates = sel.on || sel.threads.is_empty();
        if change_gates {
            let mut gates = self.read_now(self.header.ctl_offset, self.profile.gates.len())?;
            for &p in &points {
                if let Some(g) = gates.get_mut(p as usize) {
                    *g = if sel.on { *g | bit } else { *g & !bit };
                }
            }
            self.write_at(self.header.ctl_offset, &gates)?;
        }
        // Masks: the thread focus.
        if sel.on && named.is_empty() {
            for t in &live {
                set_mask(t.index, &|m| m | b)?;
            }
            self.write_control_u32(offset_of!(Control, new_thread_mask), control.new_thread_mask | b)?;
        } else if sel.on {
            if control.new_thread_mask & b != 0 {
                // The metric was on for every thread: now only for the ones named.
                self.write_control_u32(offset_of!(Control, new_thread_mask), control.new_thread_mask & !b)?;
                for t in &live {
                    set_mask(t.index, &|m| m & !b)?;
                }
            }
            for &i in &named {
                set_mask(i, &|m| m | b)?;
            }
        } else if !named.is_empty() {
            for &i in &named {
                set_mask(i, &|m| m & !b)?;
            }
        }
        self.note_change()?;
        let state = if sel.on { "on" } else { "off" };
        let where_ = if !change_gates {
            "its points unchanged".to_string()
        } else if sel.functions.is_empty() {
            format!("at all {} points", points.len())
        } else {
            format!("at {} of {capable} points ({})", points.len(), self.names(&points))
        };
        let who = if sel.threads.is_empty() {
            if sel.on {
                "every thread".to_string()
            } else {
                "threads unchanged".to_string()
            }
        } else {
            format!("thread {}", sel.threads.iter().map(u32::to_string).collect::<Vec<_>>().join(", "))
        };
        Ok(format!("{metric} {state} {where_}, {who}"))
    }

    /// The function names of `points`, at most five, then `… N more`.
    fn names(&self, points: &[u32]) -> String {
        let mut names: Vec<&str> =
            points.iter().filter_map(|&p| self.profile.point(p)).map(|p| p.function.as_str()).collect();
        names.dedup();
        let more = names.len().saturating_sub(5);
        names.truncate(5);
        let mut s = names.join(", ");
        if more > 0 {
            s.push_str(&format!(", … {more} more"));
        }
        s
    }

    /// Post request `op` on the control page's ring and send every live thread to a safe
    /// point (its key poked); returns the request's `seq` and the live threads (column, tid).
    fn post(&self, op: u32) -> Result<(u64, Vec<(u32, u32)>), CtlError> {
        let c = self.control_now()?;
        let i = c.req_head;
        let seq = i + 1;
        let slot = offset_of!(Control, requests) + (i % REQ_CAP as u64) as usize * size_of::<Request>();
        // The entry first (its seq last), then last_snapshot, then the head: a thread that sees
        // the new head finds a complete entry.
        self.write_control_u32(slot + offset_of!(Request, op), op)?;
        self.write_control_u64(slot + offset_of!(Request, realtime_ns), profile::realtime_now_ns())?;
        self.write_control_u64(slot + offset_of!(Request, seq), seq)?;
        if op == REQ_SNAPSHOT {
            self.write_control_u64(offset_of!(Control, last_snapshot), seq)?;
        }
        self.write_control_u64(offset_of!(Control, req_head), seq)?;
        let key_off = offset_of!(ColumnHeader, owner_key) as u64;
        let threads: Vec<(u32, u32)> =
            self.profile.threads.iter().filter(|t| t.alive).map(|t| (t.index, t.tid)).collect();
        let tpx_off = offset_of!(ColumnHeader, owner_tpx) as u64;
        for &(index, _) in &threads {
            if let Some(col) = self.column(index) {
                self.write_at(self.column_offset(index) + key_off, &(col.exit_key ^ KEY_POKE).to_le_bytes())?;
                // The calls-only entries do not read the key: their path is disarmed too.
                self.write_at(self.column_offset(index) + tpx_off, &0u64.to_le_bytes())?;
            }
        }
        Ok((seq, threads))
    }

    /// Wait up to `wait` until every thread of `threads` shows `done` in its column's u64 at
    /// `field`; returns the tids that did not.
    fn wait_for(&self, threads: &[(u32, u32)], field: u64, done: impl Fn(u64) -> bool, wait: Duration) -> Vec<u32> {
        let deadline = Instant::now() + wait;
        loop {
            let pending: Vec<u32> = threads
                .iter()
                .filter(|&&(index, _)| {
                    let mut b = [0u8; 8];
                    self.file.read_exact_at(&mut b, self.column_offset(index) + field).is_ok()
                        && !done(u64::from_le_bytes(b))
                })
                .map(|&(_, tid)| tid)
                .collect();
            if pending.is_empty() || Instant::now() >= deadline {
                return pending;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Post a snapshot request, send every live thread to a safe point, and wait up to `wait`
    /// for them to take it. The profile must have been opened with [`Access::Change`].
    pub fn snapshot(&self, wait: Duration) -> Result<Snapshot, CtlError> {
        let (seq, threads) = self.post(REQ_SNAPSHOT)?;
        let pending = self.wait_for(&threads, offset_of!(ColumnHeader, snap_seq) as u64, |s| s == seq, wait);
        Ok(Snapshot { seq, live_threads: threads.len(), pending })
    }

    /// Whether the program's timer routines can sample (rewritten with sampling).
    pub fn has_sampling(&self) -> bool {
        self.header.flags & FLAG_SAMPLING != 0
    }

    /// `sampling off` (`on` false): every call of every point timed from each thread's next
    /// entry on; `sampling on`: the points the runtime found short and frequent are sampled
    /// again (without learning again). Sets the control page's flag, posts a sampling request,
    /// and waits up to `wait` for the live threads to apply it. The profile must have been
    /// opened with [`Access::Change`].
    pub fn sampling(&self, on: bool, wait: Duration) -> Result<SamplingChange, CtlError> {
        if !self.has_sampling() {
            return Err(CtlError::NoSampling { path: self.name() });
        }
        self.write_control_u32(offset_of!(Control, sampling_off), u32::from(!on))?;
        let (seq, threads) = self.post(REQ_SAMPLING)?;
        self.note_change()?;
        let pending = self.wait_for(&threads, offset_of!(ColumnHeader, req_seen) as u64, |s| s >= seq, wait);
        Ok(SamplingChange { on, live_threads: threads.len(), pending })
    }

    /// Which metrics are on where, the live threads and what they measure, the control page.
    pub fn status(&self) -> Status {
        let p = &self.profile;
        let control = self.control();
        let metrics = (0..N_METRICS)
            .map(|m| {
                let bit = metric_bit(m);
                let able: Vec<u32> = p.points.iter().filter(|x| x.bits & bit != 0).map(|x| x.id).collect();
                let on: Vec<u32> =
                    able.iter().copied().filter(|&id| p.gates.get(id as usize).is_some_and(|g| g & bit != 0)).collect();
                let threads = if control.new_thread_mask & bit as u32 != 0 {
                    "all".to_string()
                } else {
                    let tids: Vec<String> = p
                        .threads
                        .iter()
                        .filter(|t| t.alive && t.thread_mask & bit as u32 != 0)
                        .map(|t| t.tid.to_string())
                        .collect();
                    if tids.is_empty() {
                        "none".into()
                    } else {
                        tids.join(" ")
                    }
                };
                let functions = if on.len() == able.len() { String::new() } else { self.names(&on) };
                MetricStatus {
                    metric: METRIC_NAMES[m as usize].to_string(),
                    points_on: on.len(),
                    points: able.len(),
                    threads,
                    functions,
                }
            })
            .collect();
        let threads = p
            .threads
            .iter()
            .filter(|t| t.alive)
            .map(|t| ThreadStatus {
                tid: t.tid,
                name: t.name.clone(),
                state: stint_layout::state_name(t.thread_state).map(str::to_owned),
                measures: mask_text(t.thread_mask),
                clock_source: t.clock_source.clone(),
                snapshot: t.snapshot,
            })
            .collect();
        Status {
            profile: self.name(),
            program: p.program.clone(),
            pid: p.pid,
            alive: p.alive,
            metrics,
            threads,
            control: p.control.clone(),
            sampling: self.has_sampling().then(|| if control.sampling_off != 0 { "off" } else { "on" }.to_string()),
            sampled_points: p.threads.iter().filter(|t| t.alive).map(|t| t.sampled.len()).sum(),
            ended_threads: p.threads.iter().filter(|t| !t.alive).count(),
        }
    }
}

/// What `sampling off|on` achieved.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SamplingChange {
    pub on: bool,
    /// Live threads when it was posted.
    pub live_threads: usize,
    /// Tids of the threads that had not applied it when the wait ended (they apply it at
    /// their next event, before it is measured).
    pub pending: Vec<u32>,
}

impl fmt::Display for SamplingChange {
    /// `sampling off: 3 of 3 live threads applied it; every call is timed from now on`
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        let taken = self.live_threads - self.pending.len();
        let state = if self.on { "on" } else { "off" };
        write!(f, "sampling {state}: {taken} of {} live threads applied it", self.live_threads)?;
        if !self.pending.is_empty() {
            let tids: Vec<String> = self.pending.iter().map(u32::to_string).collect();
            write!(f, "; {} idle ({}) apply it at their next event", self.pending.len(), tids.join(" "))?;
        }
        if self.on {
            write!(f, "; short, frequent functions are timed one call in {} again", stint_layout::SAMPLE_EVERY)
        } else {
            write!(f, "; every call is timed from now on")
        }
    }
}

/// What a snapshot request achieved.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Snapshot {
    /// The request's sequence number.
    pub seq: u64,
    /// Live threads when it was posted.
    pub live_threads: usize,
    /// Tids of the threads that had not taken it when the wait ended (idle threads take it
    /// at their next event).
    pub pending: Vec<u32>,
}

impl fmt::Display for Snapshot {
    /// `snapshot 3: 4 of 5 live threads took it; 1 idle (4250) take it at their next event …`
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        let taken = self.live_threads - self.pending.len();
        write!(f, "snapshot {}: {taken} of {} live threads took it", self.seq, self.live_threads)?;
        if !self.pending.is_empty() {
            let tids: Vec<String> = self.pending.iter().map(u32::to_string).collect();
            write!(
                f,
                "; {} idle ({}) take it at their next event (until then they count nothing new)",
                self.pending.len(),
                tids.join(" ")
            )?;
        }
        Ok(())
    }
}

/// The state of a controlled program: `stint ctl … status` prints it as a table, `--json`
/// as this document (fields in output order; `#[serde(skip)]` ones are for the table only).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Status {
    /// The profile file, as given.
    pub profile: String,
    pub program: String,
    pub pid: u32,
    /// The process still runs.
    pub alive: bool,
    /// Every metric, in id order.
    pub metrics: Vec<MetricStatus>,
    /// The live threads, in column order.
    pub threads: Vec<ThreadStatus>,
    /// The control page and the control file's outcome.
    pub control: ControlInfo,
    /// `on` or `off` (`stint ctl … sampling`); `null`: rewritten without sampling.
    #[serde(default)]
    pub sampling: Option<String>,
    /// (live thread, point) pairs sampled now or paused by `sampling off`.
    #[serde(default)]
    pub sampled_points: usize,
    /// Threads of the profile that have ended (not listed).
    #[serde(skip)]
    pub ended_threads: usize,
}

/// Where one metric is on.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MetricStatus {
    /// The metric's name.
    pub metric: String,
    /// Points whose gate has the metric on.
    pub points_on: usize,
    /// Points that can measure it (0: not built into the program).
    pub points: usize,
    /// Its thread focus: `all`, `none`, or the tids.
    pub threads: String,
    /// The functions it is on at, when not at every point (at most five names, then
    /// `… N more`); empty when on everywhere.
    #[serde(skip)]
    pub functions: String,
}

/// One live thread and what it measures.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ThreadStatus {
    pub tid: u32,
    pub name: Option<String>,
    /// Its state (`RUN`, `BLOCKED_MUTEX`, …); `null` if the file holds an unknown value.
    pub state: Option<String>,
    /// The metrics its mask has on (`all`, `none`, `all but …`, or a list).
    pub measures: String,
    pub clock_source: Option<String>,
    /// The newest snapshot it took.
    pub snapshot: u64,
}

/// A thread mask as text: `all`, `none`, `all but lock_hold,state_trace`, or the names.
pub fn mask_text(mask: u32) -> String {
    if mask & 0x3f == 0x3f {
        return "all".into();
    }
    let names = |on: bool| -> Vec<&str> {
        (0..N_METRICS).filter(|&m| (mask & (1 << m) != 0) == on).map(|m| METRIC_NAMES[m as usize]).collect()
    };
    let (on, off) = (names(true), names(false));
    if on.is_empty() {
        "none".into()
    } else if off.len() < on.len() {
        format!("all but {}", off.join(","))
    } else {
        on.join(",")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn focus_checks_its_arguments_in_order() {
        let names = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let e = Focus::new(&names(&["calls", "bogus"]), false, names(&["f"]), vec![1]).unwrap_err();
        assert!(matches!(&e, CtlError::UnknownMetric { name } if name == "bogus"));
        assert!(e.to_string().starts_with("unknown metric 'bogus' (known: calls, "), "{e}");
        let e = Focus::new(&names(&["calls"]), false, names(&["f"]), vec![1]).unwrap_err();
        assert!(matches!(e, CtlError::DisableBoth));
        let f = Focus::new(&names(&["all"]), true, names(&["f"]), vec![1]).unwrap();
        assert_eq!(f.selections().count(), N_METRICS as usize);
    }

    #[test]
    fn masks_as_text() {
        assert_eq!(mask_text(0x3f), "all");
        assert_eq!(mask_text(0), "none");
        assert_eq!(mask_text(0b1), "calls");
        assert_eq!(mask_text(0b01_1111), format!("all but {}", METRIC_NAMES[5]));
    }

    #[test]
    fn an_ended_process_cannot_be_changed_but_can_be_read() {
        let dir = std::env::temp_dir().join(format!("stint-ctl-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("p.stint");
        let meta = crate::synthetic::synthetic_meta("p", &[("main", "0x1000")]);
        // A pid that does not run.
        std::fs::write(&path, crate::synthetic::write_synthetic(&meta, &[(u32::MAX - 1, vec![(0, 1)])])).unwrap();
        let e = LiveProfile::open(&path, Access::Change).err().unwrap();
        assert!(matches!(e, CtlError::Ended { .. }), "{e}");
        let s = LiveProfile::open(&path, Access::Read).unwrap().status();
        assert_eq!((s.pid, s.alive, s.metrics.len()), (u32::MAX - 1, false, N_METRICS as usize));
        let link = dir.join("link");
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(&path, &link).unwrap();
        let e = LiveProfile::open(&link, Access::Read).err().unwrap();
        assert_eq!(e.to_string(), format!("{}: is a symbolic link; give the profile file itself", link.display()));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
