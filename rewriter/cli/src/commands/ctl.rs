//! `stint ctl`: switch metrics on and off in a running rewritten program, per function and
//! per thread, show what is on, and post snapshot requests (D10).
//!
//! Everything goes through the profile file the program maps `MAP_SHARED`: writing a gate
//! byte or a thread's mask with `pwrite` changes what the program's trampolines see at
//! their next event, without stopping it. What needs the program's cooperation (a
//! snapshot) is posted on the control page's requests ring; each thread handles it at its
//! next safe point (see `rt-lib/src/control.rs`).
//!
//! # What "on" means
//! Metric m is measured at point p on thread t when bit m is set in p's gate byte (the
//! function focus) and in t's thread mask (the thread focus). `enable m --thread T` makes
//! T the only thread measuring m (or adds T when m already has a thread focus); `enable m`
//! without `--thread` measures m on every thread, present and future. A frame that is open
//! when its timers go off is still closed at its exit; an exit whose entry was not measured
//! is ignored.

use anyhow::{anyhow, bail, Context, Result};
use std::fs::File;
use std::mem::{offset_of, size_of};
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use stint_layout::control_file::glob_match;
use stint_layout::{
    metric_bit, metric_id, ColumnHeader, Control, FileHeader, Request, FILE_MAGIC, KEY_POKE, METRIC_NAMES, N_METRICS,
    REQ_CAP, REQ_SNAPSHOT,
};
use stint_profile::profile::{self, Profile};

/// Arguments of `stint ctl`.
#[derive(clap::Args, Debug)]
#[command(after_help = "EXAMPLES:\n  \
    stint ctl /tmp/server.4242.stint status\n  \
    stint ctl /tmp/server.4242.stint enable cpu_time --function 'parse_*' --thread 4247\n  \
    stint ctl /tmp/server.4242.stint disable calls\n  \
    stint ctl /tmp/server.4242.stint enable all\n  \
    stint ctl /tmp/server.4242.stint snapshot      # then: stint report ... --since-snapshot\n\n\
    Metrics: calls, cpu_time, wall_time, lock_wait, lock_hold, state_trace, or all.\n\
    A metric is measured where both its function focus (--function) and its thread focus\n\
    (--thread) say so; changes reach the program at its next event.")]
pub struct Args {
    /// The profile file of a running program (`stint ls` lists them).
    pub profile: PathBuf,
    #[command(subcommand)]
    pub action: Action,
}

#[derive(clap::Subcommand, Debug)]
pub enum Action {
    /// Show which metrics are on where, the threads and their clocks, snapshots, the
    /// control file.
    Status {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Turn metrics on (for the functions and threads given, else everywhere).
    Enable(Focus),
    /// Turn metrics off (for the functions or the threads given, else everywhere).
    Disable(Focus),
    /// Ask every thread to record a baseline at its next safe point; `stint report
    /// --since-snapshot` then shows only what happened after it.
    Snapshot {
        /// How long to wait for the threads to take it, in milliseconds.
        #[arg(long, default_value_t = 500)]
        wait_ms: u64,
    },
}

#[derive(clap::Args, Debug)]
pub struct Focus {
    /// Metric names (or `all`).
    #[arg(required = true)]
    pub metrics: Vec<String>,
    /// Only functions whose name matches this glob (`*`, `?`); repeatable.
    #[arg(long = "function", short = 'f')]
    pub functions: Vec<String>,
    /// Only this thread (kernel tid, as `status` lists them); repeatable.
    #[arg(long = "thread", short = 't')]
    pub threads: Vec<u32>,
}

/// One change to a running program's metrics.
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

pub fn run(args: Args) -> Result<()> {
    let path = &args.profile;
    match args.action {
        Action::Status { json } => {
            let live = Live::open(path, false)?;
            let text =
                if json { serde_json::to_string_pretty(&status_json(&live))? + "\n" } else { status_text(&live) };
            print!("{text}");
            Ok(())
        }
        Action::Enable(f) => focus(path, &f, true),
        Action::Disable(f) => focus(path, &f, false),
        Action::Snapshot { wait_ms } => {
            let live = Live::open(path, true)?;
            println!("{}", snapshot(&live, Duration::from_millis(wait_ms))?);
            Ok(())
        }
    }
}

fn focus(path: &Path, f: &Focus, on: bool) -> Result<()> {
    let mut metrics = Vec::new();
    for m in &f.metrics {
        if m == "all" {
            metrics.extend(0..N_METRICS);
        } else {
            metrics.push(
                metric_id(m.as_bytes())
                    .ok_or_else(|| anyhow!("unknown metric '{m}' (known: {}, all)", METRIC_NAMES.join(", ")))?,
            );
        }
    }
    if !on && !f.functions.is_empty() && !f.threads.is_empty() {
        bail!("disable takes --function or --thread, not both (a metric's thread focus covers all its functions)");
    }
    let live = Live::open(path, true)?;
    for &metric in &metrics {
        let line = live.apply(&Selection { metric, on, functions: &f.functions, threads: &f.threads })?;
        println!("{line}");
    }
    Ok(())
}

/// Apply `change` to the live profile at `path`; returns a one-line summary of what changed
/// ("cpu_time on at 12 points, thread 4247").
pub fn apply(path: &Path, change: &Change) -> Result<String> {
    let live = Live::open(path, true)?;
    let functions: Vec<String> = change.function.iter().cloned().collect();
    let threads: Vec<u32> = change.thread.iter().copied().collect();
    live.apply(&Selection { metric: change.metric, on: change.on, functions: &functions, threads: &threads })
}

struct Selection<'a> {
    metric: u32,
    on: bool,
    functions: &'a [String],
    threads: &'a [u32],
}

/// An open profile file of a (normally) running process, read once.
struct Live {
    path: PathBuf,
    file: File,
    bytes: Vec<u8>,
    header: FileHeader,
    profile: Profile,
}

const O_NOFOLLOW: i32 = 0o400000;

impl Live {
    /// Open for reading, or for changing (`write`: the file must be ours and the process
    /// alive; an exclusive lock keeps two `stint ctl` from interleaving).
    fn open(path: &Path, write: bool) -> Result<Live> {
        let name = path.display().to_string();
        let file = std::fs::OpenOptions::new().read(true).write(write).custom_flags(O_NOFOLLOW).open(path).map_err(
            |e| match e.raw_os_error() {
                Some(40) => anyhow!("{name}: is a symbolic link; give the profile file itself"),
                _ => anyhow!("{name}: {e}"),
            },
        )?;
        let meta = file.metadata().with_context(|| name.clone())?;
        if !meta.is_file() {
            bail!("{name}: not a regular file");
        }
        if write {
            let me = std::fs::metadata("/proc/self").map(|m| m.uid()).unwrap_or(u32::MAX);
            if meta.uid() != me {
                bail!("{name}: owned by uid {}, not by you; only the owner controls a program", meta.uid());
            }
            file.lock().with_context(|| format!("{name}: cannot lock"))?;
        }
        let bytes = std::fs::read(path).with_context(|| name.clone())?;
        if bytes.get(..8) != Some(&FILE_MAGIC[..]) {
            bail!("{name}: not a stint profile (bad magic)");
        }
        let header = FileHeader::parse(&bytes, bytes.len() as u64).map_err(|e| anyhow!("{name}: {e}"))?;
        let profile = profile::parse(&bytes).map_err(|e| anyhow!("{name}: {e}"))?;
        if write && !profile.alive {
            bail!("{name}: process {} is not running; its profile is final", profile.pid);
        }
        Ok(Live { path: path.to_path_buf(), file, bytes, header, profile })
    }

    fn name(&self) -> String {
        self.path.display().to_string()
    }

    fn write_at(&self, off: u64, data: &[u8]) -> Result<()> {
        self.file.write_all_at(data, off).map_err(|e| anyhow!("{}: cannot write: {e}", self.name()))
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

    fn write_control_u32(&self, field: usize, v: u32) -> Result<()> {
        self.write_at(self.header.control_offset + field as u64, &v.to_le_bytes())
    }

    fn write_control_u64(&self, field: usize, v: u64) -> Result<()> {
        self.write_at(self.header.control_offset + field as u64, &v.to_le_bytes())
    }

    fn note_change(&self) -> Result<()> {
        let c = self.control();
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

    fn apply(&self, sel: &Selection) -> Result<String> {
        let metric = METRIC_NAMES[sel.metric as usize];
        let bit = metric_bit(sel.metric);
        let capable = self.profile.points.iter().filter(|p| p.bits & bit != 0).count();
        if capable == 0 {
            bail!("{}: {metric} is not built into this program (rewrite it with a spec that has it)", self.name());
        }
        let points = self.points(sel);
        if points.is_empty() && (sel.on || sel.threads.is_empty()) {
            bail!("{}: no function matches {} for {metric}", self.name(), sel.functions.join(", "));
        }
        // The threads named must be live threads of the process.
        let live: Vec<&profile::ThreadProfile> = self.profile.threads.iter().filter(|t| t.alive).collect();
        let mut named = Vec::new();
        for &tid in sel.threads {
            let cols: Vec<u32> = live.iter().filter(|t| t.tid == tid).map(|t| t.index).collect();
            if cols.is_empty() {
                let tids: Vec<String> = live.iter().map(|t| t.tid.to_string()).collect();
                bail!(
                    "{}: {tid} is not a live thread of pid {} (threads: {})",
                    self.name(),
                    self.profile.pid,
                    tids.join(" ")
                );
            }
            named.extend(cols);
        }
        let control = self.control();
        let mask_off = offset_of!(ColumnHeader, thread_mask) as u64;
        let set_mask = |index: u32, f: &dyn Fn(u32) -> u32| -> Result<()> {
            if let Some(c) = self.column(index) {
                self.write_at(self.column_offset(index) + mask_off, &f(c.thread_mask).to_le_bytes())?;
            }
            Ok(())
        };
        let b = bit as u32;
        // Gates: the function focus.
        let change_gates = sel.on || sel.threads.is_empty();
        if change_gates {
            let mut gates = self.profile.gates.clone();
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
}

/// Post a snapshot request, send every live thread to a safe point, and wait for them.
fn snapshot(live: &Live, wait: Duration) -> Result<String> {
    let c = live.control();
    let i = c.req_head;
    let seq = i + 1;
    let slot = offset_of!(Control, requests) + (i % REQ_CAP as u64) as usize * size_of::<Request>();
    // The entry first (its seq last), then last_snapshot, then the head: a thread that sees
    // the new head finds a complete entry.
    live.write_control_u32(slot + offset_of!(Request, op), REQ_SNAPSHOT)?;
    live.write_control_u64(slot + offset_of!(Request, realtime_ns), profile::realtime_now_ns())?;
    live.write_control_u64(slot + offset_of!(Request, seq), seq)?;
    live.write_control_u64(offset_of!(Control, last_snapshot), seq)?;
    live.write_control_u64(offset_of!(Control, req_head), seq)?;
    let key_off = offset_of!(ColumnHeader, owner_key) as u64;
    let threads: Vec<(u32, u32)> = live.profile.threads.iter().filter(|t| t.alive).map(|t| (t.index, t.tid)).collect();
    for &(index, _) in &threads {
        if let Some(col) = live.column(index) {
            live.write_at(live.column_offset(index) + key_off, &(col.exit_key ^ KEY_POKE).to_le_bytes())?;
        }
    }
    let seq_off = offset_of!(ColumnHeader, snap_seq) as u64;
    let deadline = Instant::now() + wait;
    let mut pending: Vec<(u32, u32)>;
    loop {
        pending = threads
            .iter()
            .copied()
            .filter(|&(index, _)| {
                let mut b = [0u8; 8];
                live.file.read_exact_at(&mut b, live.column_offset(index) + seq_off).is_ok()
                    && u64::from_le_bytes(b) != seq
            })
            .collect();
        if pending.is_empty() || Instant::now() >= deadline {
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let taken = threads.len() - pending.len();
    let mut line = format!("snapshot {seq}: {taken} of {} live threads took it", threads.len());
    if !pending.is_empty() {
        let tids: Vec<String> = pending.iter().map(|(_, t)| t.to_string()).collect();
        line.push_str(&format!(
            "; {} idle ({}) take it at their next event (until then they count nothing new)",
            pending.len(),
            tids.join(" ")
        ));
    }
    Ok(line)
}

fn mask_text(mask: u32) -> String {
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

/// Per metric: (points on, points able, function names on, thread focus).
fn metric_rows(live: &Live) -> Vec<(String, usize, usize, String, String)> {
    let p = &live.profile;
    let control = live.control();
    (0..N_METRICS)
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
            let names = if on.len() == able.len() { String::new() } else { live.names(&on) };
            (METRIC_NAMES[m as usize].to_string(), on.len(), able.len(), names, threads)
        })
        .collect()
}

fn status_text(live: &Live) -> String {
    use std::fmt::Write;
    let p = &live.profile;
    let mut s = String::new();
    let state = if p.alive { "running" } else { "ended" };
    let _ = writeln!(s, "{}: {} (pid {}, {state})", live.name(), p.program, p.pid);
    let c = &p.control;
    match c.control_file.as_str() {
        "none" => {}
        "applied" => {
            let _ = writeln!(s, "control file: {} (applied at start)", c.control_message);
        }
        other => {
            let _ = writeln!(s, "control file: {other}: {}", c.control_message);
        }
    }
    let _ = writeln!(s, "\nMETRIC       POINTS ON      THREADS   FUNCTIONS");
    for (name, on, able, names, threads) in metric_rows(live) {
        if able == 0 {
            let _ = writeln!(s, "{name:<12} not built in");
            continue;
        }
        let _ = writeln!(s, "{name:<12} {:<14} {threads:<9} {names}", format!("{on} of {able}"));
    }
    let _ = writeln!(s, "\nTID      NAME             STATE              MEASURES             CLOCK");
    for t in p.threads.iter().filter(|t| t.alive) {
        let _ = writeln!(
            s,
            "{:<8} {:<16} {:<18} {:<20} {}",
            t.tid,
            t.name.as_deref().unwrap_or("-"),
            stint_layout::state_name(t.thread_state).unwrap_or("?"),
            mask_text(t.thread_mask),
            t.clock_source.as_deref().unwrap_or("-")
        );
    }
    let ended = p.threads.iter().filter(|t| !t.alive).count();
    if ended > 0 {
        let _ = writeln!(s, "({ended} ended threads not shown)");
    }
    if c.last_snapshot != 0 {
        let took = p.threads.iter().filter(|t| t.alive && t.snapshot == c.last_snapshot).count();
        let live_n = p.threads.iter().filter(|t| t.alive).count();
        let _ = writeln!(s, "\nsnapshot {}: {took} of {live_n} live threads took it", c.last_snapshot);
    }
    if c.changes != 0 {
        let _ = writeln!(s, "changes by stint ctl: {}", c.changes);
    }
    s
}

fn status_json(live: &Live) -> serde_json::Value {
    use serde_json::json;
    let p = &live.profile;
    let metrics: Vec<_> = metric_rows(live)
        .into_iter()
        .map(
            |(name, on, able, _, threads)| json!({"metric": name, "points_on": on, "points": able, "threads": threads}),
        )
        .collect();
    let threads: Vec<_> = p
        .threads
        .iter()
        .filter(|t| t.alive)
        .map(|t| {
            json!({
                "tid": t.tid,
                "name": t.name,
                "state": stint_layout::state_name(t.thread_state),
                "measures": mask_text(t.thread_mask),
                "clock_source": t.clock_source,
                "snapshot": t.snapshot,
            })
        })
        .collect();
    json!({
        "profile": live.name(),
        "program": p.program,
        "pid": p.pid,
        "alive": p.alive,
        "metrics": metrics,
        "threads": threads,
        "control": p.control,
    })
}
