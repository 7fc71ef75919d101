//! Run-time control (D10): the control file at start, the thread focus, and the requests
//! ring of the control page, handled at safe points.
//!
//! Everything read from the control page comes from outside the process (`stint ctl`, or
//! anything else that can write the file): it is validated before use, and nothing read
//! there ever becomes an index or length without a bound check.
//!
//! # Safe points
//! A thread handles requests where it is in the runtime anyway and no frame is half
//! written: registration, the refresh of its key, the timer slow path, a wrapper. `stint
//! ctl` makes the next event of every thread such a point by changing its `owner_key`
//! (`exit_key ^ KEY_POKE`): the entry trampolines and wrappers then miss and come here,
//! the timer routines compare the two keys, exits keep closing frames. The key is put back
//! before the requests are handled.
//!
//! Layering: uses `sys`, `text`, `state`, `column` and `clock`; used by `profile_file`
//! (the control file, at creation), `threads` (registration) and the event paths.
#![allow(unsafe_code)]

use crate::clock;
use crate::column::Column;
use crate::state::{Rt, Startup, ALL_METRICS};
use crate::sys;
use crate::text::{copy_into, copy_str, trim_nul, Writer};
use core::ptr::{read_volatile, write_volatile};
use core::sync::atomic::{fence, Ordering};
use stint_layout::control_file::{self, glob_match, ThreadSel};
use stint_layout::{
    metric_bit, ColumnHeader, Control, Request, ThreadRule, CCT_CAP, CONTROL_FILE_APPLIED, CONTROL_FILE_REJECTED,
    CONTROL_OFFSET, GATE_HOOK, METRIC_CALLS, METRIC_CPU_TIME, METRIC_WALL_TIME, N_STATES, POINT_INFO_WRAP, REQ_CAP,
    REQ_SAMPLING, REQ_SNAPSHOT, SAMPLE_NEVER, SAMPLE_ON, SAMPLE_PAUSED, SLOT_ACTIVE, SLOT_CPU_TICKS, SLOT_WALL_TICKS,
    THREAD_RULES_CAP,
};

/// The control page of the mapped profile. Its place is our constant, never the header's
/// `control_offset`, which anyone who can write the file could change. Anyone may write the
/// page at any time: it is read field by field with volatile loads, never by reference.
fn page(rt: &Rt) -> Option<*mut Control> {
    let hdr = rt.file_header()?;
    Some((hdr as usize + CONTROL_OFFSET as usize) as *mut Control)
}

/// The metric bits a registering (or newly named) thread measures: the page's default for
/// new threads, plus what a matching thread rule adds.
pub fn thread_mask(rt: &Rt, tid: u32, name: &[u8; 16]) -> u32 {
    let Some(c) = page(rt) else { return ALL_METRICS };
    // Safety: the control page is mapped for the whole run; fields are read one by one.
    let (mut mask, n) =
        unsafe { (read_volatile(&raw const (*c).new_thread_mask), read_volatile(&raw const (*c).n_thread_rules)) };
    let name = trim_nul(name);
    for i in 0..(n as usize).min(THREAD_RULES_CAP) {
        // Safety: i < THREAD_RULES_CAP.
        let r: ThreadRule = unsafe { read_volatile((&raw const (*c).thread_rules as *const ThreadRule).add(i)) };
        let hit = if r.tid != 0 { r.tid == tid } else { glob_match(trim_nul(&r.name), name) };
        if hit {
            mask |= r.mask;
        }
    }
    mask & ALL_METRICS
}

/// Whether any thread rule names threads by name (then naming a thread re-evaluates it).
pub fn has_name_rules(rt: &Rt) -> bool {
    let Some(c) = page(rt) else { return false };
    // Safety: as in `thread_mask`.
    unsafe { read_volatile(&raw const (*c).n_thread_rules) != 0 }
}

/// Registration: a new thread starts after every request posted so far, and its (zero)
/// counters are the baseline of the newest snapshot.
pub fn on_register(rt: &Rt, col: &mut ColumnHeader) {
    col.thread_mask = thread_mask(rt, col.tid, &col.name);
    col.cct_mask = rt.st.cct_mask();
    col.exit_key = col.owner_key;
    if let Some(c) = page(rt) {
        // Safety: the control page is mapped.
        unsafe {
            col.req_seen = read_volatile(&raw const (*c).req_head);
            col.snap_seq = read_volatile(&raw const (*c).last_snapshot);
        }
    }
}

/// A safe point of the thread that owns `col` (GS points at it): put its key back if `stint
/// ctl` changed it, and handle the requests it has not seen. Every wrapper and timer slow
/// path passes here, so the common case (no new request) is inlined into them.
#[inline(always)]
pub fn safe_point(rt: &Rt, col: &mut Column) {
    if col.h.owner_key != col.h.exit_key {
        col.h.owner_key = col.h.exit_key;
    }
    let Some(c) = page(rt) else { return };
    // Safety: the control page is mapped.
    let head = unsafe { read_volatile(&raw const (*c).req_head) };
    if head != col.h.req_seen {
        requests(col, rt, c, head);
    }
}

/// The requests `req_seen..head` of the ring on page `c`.
#[cold]
#[inline(never)]
fn requests(col: &mut Column, rt: &Rt, c: *mut Control, head: u64) {
    fence(Ordering::Acquire);
    if head < col.h.req_seen {
        // The page went backwards (rewritten by hand?): start over from here.
        col.h.req_seen = head;
        return;
    }
    let mut snapshot = None;
    let mut sampling = false;
    for i in col.h.req_seen.max(head.saturating_sub(REQ_CAP as u64))..head {
        // Safety: the index is taken modulo REQ_CAP.
        let r: Request =
            unsafe { read_volatile((&raw const (*c).requests as *const Request).add((i % REQ_CAP as u64) as usize)) };
        if r.seq != i + 1 {
            continue; // torn, stale or forged: ignored
        }
        if r.op == REQ_SNAPSHOT {
            snapshot = Some(r.seq);
        }
        sampling |= r.op == REQ_SAMPLING;
    }
    // Sampling before the snapshot: a snapshot posted after `sampling off` starts an interval
    // in which every call is timed.
    if sampling {
        apply_sampling(rt, col);
    }
    if let Some(seq) = snapshot {
        take_snapshot(rt, col, seq);
    }
    col.h.req_seen = head;
}

/// Whether `stint ctl … sampling off` holds (the page's `sampling_off`, only compared with 0).
pub fn sampling_off(rt: &Rt) -> bool {
    let Some(c) = page(rt) else { return false };
    // Safety: the control page is mapped; one field read.
    unsafe { read_volatile(&raw const (*c).sampling_off) != 0 }
}

/// A sampling request: pause (`sampling off`) or resume (`on`) every point this thread
/// samples, from its next entry on. A paused point keeps `SAMPLE_ON` (its frames stay
/// `FRAME_SAMPLED`, its timed calls counted) and times every entry; resuming keeps what the
/// point learnt (a short, frequent function stays one), so no point is timed 512 times again.
/// Frames already open keep their bits: an untimed one still closes without a clock.
fn apply_sampling(rt: &Rt, col: &mut Column) {
    let off = sampling_off(rt);
    for point in 0..col.geometry().n_points {
        if let Some(active) = col.counter_mut(SLOT_ACTIVE, point) {
            // Only a sampled point's state changes; the entry routine never writes these bits.
            if *active & SAMPLE_ON != 0 && *active & SAMPLE_NEVER == 0 {
                *active = if off { *active | SAMPLE_PAUSED } else { *active & !SAMPLE_PAUSED };
            }
        }
    }
}

/// Copy this thread's waits, state times and counters into its baseline, with its open
/// frames and open state counted up to now, then publish `snap_seq`.
fn take_snapshot(rt: &Rt, col: &mut Column, seq: u64) {
    let now = sys::rdtsc();
    let cpu_now = clock::cpu_ticks_now(col.h, rt.st.tsc_hz(), &rt.st.rseq);
    let mut states = [0u64; N_STATES as usize];
    for (s, t) in states.iter_mut().enumerate() {
        *t = col.h.state_ticks.get(s).copied().unwrap_or(0);
        if s == col.h.thread_state as usize {
            *t = t.saturating_add(now.saturating_sub(col.h.state_since));
        }
    }
    if !col.save_baseline(&states) {
        return; // no blocks for the baseline (a full file system): no snapshot on this thread
    }
    // Open frames: the outermost activation of each point adds its time so far.
    let n = col.geometry().n_points;
    let kept = col.h.depth.min(col.shadow_cap());
    for d in 0..kept {
        let Some(f) = col.frame(d) else { break };
        if f.point >= n || (0..d).any(|e| col.frame(e).is_some_and(|g| g.point == f.point)) {
            continue;
        }
        if f.bits & metric_bit(METRIC_WALL_TIME) as u32 != 0 {
            col.add_to_baseline(SLOT_WALL_TICKS, f.point, now.saturating_sub(f.wall_start));
        }
        if f.bits & metric_bit(METRIC_CPU_TIME) as u32 != 0 {
            col.add_to_baseline(SLOT_CPU_TICKS, f.point, cpu_now.saturating_sub(f.cpu_start));
        }
    }
    col.h.snap_tsc = now;
    fence(Ordering::Release);
    // Safety: our own column's header field.
    unsafe { write_volatile(&raw mut col.h.snap_seq, seq) };
}

/// Largest control file read.
const CONTROL_MAX: usize = control_file::MAX_TEXT;

/// Apply the control file `path` (STINT_CONTROL) to the gates of a new profile before they go
/// live: `gates` is the profile's gate region (`n_points` bytes), `control` its control page,
/// neither published yet. A file that cannot be read or parsed turns every metric off and
/// says so once on stderr. Single-threaded (it uses the start-up scratch).
pub fn apply_file(rt: &Rt, su: &mut Startup, path: &[u8], gates: &mut [u8], control: &mut Control) {
    copy_str(&mut control.control_message, path);
    // Safety: not MAP_FIXED: fresh memory the kernel chooses.
    let buf = match unsafe {
        sys::mmap(0, CONTROL_MAX + 1, sys::PROT_READ | sys::PROT_WRITE, sys::MAP_PRIVATE | sys::MAP_ANONYMOUS, -1, 0)
    } {
        Ok(b) => b,
        Err(e) => return reject(rt, path, gates, control, b"cannot map a buffer", Some(e)),
    };
    // Safety: CONTROL_MAX + 1 fresh bytes, unmapped below after the last use of `text`.
    let text = unsafe { core::slice::from_raw_parts_mut(buf as *mut u8, CONTROL_MAX + 1) };
    match read_file(su, path, text) {
        Ok(len) => match control_file::parse(text.get(..len).unwrap_or(&[])) {
            Ok(cf) => {
                apply(rt, &cf, gates, control);
                control.control_file = CONTROL_FILE_APPLIED;
            }
            Err(e) => {
                let mut msg = [0u8; 160];
                let mut w = Writer::new(&mut msg);
                if e.line != 0 {
                    w.put(b"line ");
                    w.num(e.line as u64);
                    w.put(b": ");
                }
                w.put(e.what.as_bytes());
                reject(rt, path, gates, control, w.written(), None);
            }
        },
        Err(e) => reject(rt, path, gates, control, b"cannot read", Some(e)),
    }
    // Safety: our own buffer; `text` (and the parse borrowing it) is dead.
    let _ = unsafe { sys::munmap(buf, CONTROL_MAX + 1) };
}

/// Whether the control file (`STINT_CONTROL`, if any) says `children: off` (D22). A file
/// that cannot be read or parsed says nothing here ([`apply_file`] reports it). Uses the
/// start-up scratch path, like [`apply_file`].
pub fn children_off(su: &mut Startup) -> bool {
    if su.control_len == 0 {
        return false;
    }
    let mut path = [0u8; crate::state::CONTROL_PATH_MAX];
    let n = copy_into(&mut path, &[su.control_path.get(..su.control_len as usize).unwrap_or(&[])]);
    // Safety: not MAP_FIXED: fresh memory the kernel chooses.
    let Ok(buf) = (unsafe {
        sys::mmap(0, CONTROL_MAX + 1, sys::PROT_READ | sys::PROT_WRITE, sys::MAP_PRIVATE | sys::MAP_ANONYMOUS, -1, 0)
    }) else {
        return false;
    };
    // Safety: CONTROL_MAX + 1 fresh bytes, unmapped below after the last use of `text`.
    let text = unsafe { core::slice::from_raw_parts_mut(buf as *mut u8, CONTROL_MAX + 1) };
    let off = match read_file(su, path.get(..n).unwrap_or(&[]), text) {
        Ok(len) => control_file::parse(text.get(..len).unwrap_or(&[])).is_ok_and(|cf| cf.children == Some(false)),
        Err(_) => false,
    };
    // Safety: our own buffer; `text` is dead.
    let _ = unsafe { sys::munmap(buf, CONTROL_MAX + 1) };
    off
}

fn read_file(su: &mut Startup, path: &[u8], out: &mut [u8]) -> Result<usize, sys::Errno> {
    let n = copy_into(&mut su.path, &[path, b"\0"]);
    if n != path.len() + 1 {
        return Err(sys::Errno(36)); // ENAMETOOLONG
    }
    let fd = sys::open(su.path.get(..n).unwrap_or(&[]), sys::O_RDONLY | sys::O_CLOEXEC, 0)? as i32;
    let mut n = 0;
    while let Some(rest) = out.get_mut(n..).filter(|r| !r.is_empty()) {
        match sys::read(fd, rest) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(sys::Errno::EINTR) => continue,
            Err(e) => {
                sys::close(fd);
                return Err(e);
            }
        }
    }
    sys::close(fd);
    if n > CONTROL_MAX {
        return Err(sys::Errno(27)); // EFBIG
    }
    Ok(n)
}

/// Every gate off, the reason on the page and once on stderr.
fn reject(rt: &Rt, path: &[u8], gates: &mut [u8], control: &mut Control, why: &[u8], err: Option<sys::Errno>) {
    gates.fill(0);
    control.control_file = CONTROL_FILE_REJECTED;
    let mut msg = [0u8; 256];
    let mut w = Writer::new(&mut msg);
    w.put(why);
    if let Some(e) = err {
        w.put(b": ");
        w.put(e.name().as_bytes());
    }
    let why = w.written();
    control.control_message = [0; 256];
    copy_str(&mut control.control_message, why);
    let mut line = [0u8; 1024];
    let mut w = Writer::new(&mut line);
    w.put(b"stint: ");
    w.put(rt.cfg.program_name());
    w.put(b": control file '");
    w.put(path);
    w.put(b"': ");
    w.put(why);
    w.put(b"; running with every metric off\n");
    sys::write_all(2, w.written());
}

/// The control file's `on:`, `functions:` and `threads:` applied to the gates and the page.
fn apply(rt: &Rt, cf: &control_file::ControlFile, gates: &mut [u8], control: &mut Control) {
    // `call_paths:` decides over the spec and STINT_CALLTREE_NODES (threads register later).
    match cf.call_paths {
        Some(false) => rt.st.set_cct_mask(0),
        Some(true) if rt.st.cct_mask() == 0 => rt.st.set_cct_mask(2 * CCT_CAP - 1),
        _ => {}
    }
    let info = rt.cfg.point_info();
    let mut rest = rt.cfg.point_names();
    let calls = metric_bit(METRIC_CALLS);
    for (g, &i) in gates.iter_mut().zip(info) {
        let end = rest.iter().position(|&b| b == 0).unwrap_or(rest.len());
        let name = rest.get(..end).unwrap_or(&[]);
        rest = rest.get(end + 1..).unwrap_or(&[]);
        let caps = i & !POINT_INFO_WRAP;
        let on = match cf.on {
            Some(m) => (m | GATE_HOOK) & caps,
            None => *g,
        };
        let selected = cf.function_selected(name);
        *g = if i & POINT_INFO_WRAP != 0 {
            // A wrapper's lock metrics are per object, not per function: only its call
            // count follows `functions:`.
            (on & !calls) | if selected { on & calls } else { 0 }
        } else if selected {
            on
        } else {
            0
        };
    }
    let threads = cf.threads();
    if cf.has_threads() {
        control.new_thread_mask = 0;
        let mut k = 0;
        for (t, r) in threads.iter().zip(control.thread_rules.iter_mut()) {
            *r = ThreadRule { mask: ALL_METRICS, tid: 0, name: [0; 24] };
            match *t {
                ThreadSel::Tid(tid) => r.tid = tid,
                ThreadSel::Name(g) => copy_str(&mut r.name, g),
            }
            k += 1;
        }
        control.n_thread_rules = k;
    }
}
