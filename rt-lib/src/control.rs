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
#![allow(unsafe_code)]

use crate::runtime::{self, at, Cfg, RtState, ALL_METRICS};
use crate::sys;
use core::mem::size_of;
use core::ptr::{read_volatile, write_volatile};
use core::sync::atomic::{fence, Ordering};
use stint_layout::control_file::{self, glob_match, ThreadSel};
use stint_layout::{
    baseline_offset, metric_bit, ColumnHeader, Control, Frame, Request, ThreadRule, WaitEntry, BASELINE_COUNTERS,
    BASELINE_STATES, BASELINE_WAITS, CONTROL_FILE_APPLIED, CONTROL_FILE_REJECTED, CONTROL_OFFSET, COUNTERS_OFFSET,
    FRAME_SIZE, GATE_HOOK, METRIC_CALLS, METRIC_CPU_TIME, METRIC_WALL_TIME, N_STATES, POINT_INFO_WRAP, REQ_CAP,
    REQ_SNAPSHOT, SHADOW_CAP, SHADOW_OFFSET, SLOT_CPU_TICKS, SLOT_WALL_TICKS, THREAD_RULES_CAP, WAITS_OFFSET, WAIT_CAP,
};

/// The control page of the mapped profile. Its place is our constant, never the header's
/// `control_offset`, which anyone who can write the file could change.
pub(crate) fn page(config: Cfg) -> Option<*mut Control> {
    let hdr = runtime::file_header(config)?;
    Some((hdr as usize + CONTROL_OFFSET as usize) as *mut Control)
}

/// The metric bits a registering (or newly named) thread measures: the page's default for
/// new threads, plus what a matching thread rule adds.
pub(crate) fn thread_mask(config: Cfg, tid: u32, name: &[u8; 16]) -> u32 {
    let Some(c) = page(config) else { return ALL_METRICS };
    // Safety: the control page is mapped for the whole run; fields are read one by one.
    let (mut mask, n) = unsafe { (read_volatile(&(*c).new_thread_mask), read_volatile(&(*c).n_thread_rules)) };
    let name = trim(name);
    for i in 0..(n as usize).min(THREAD_RULES_CAP) {
        // Safety: i < THREAD_RULES_CAP.
        let r: ThreadRule = unsafe { read_volatile((*c).thread_rules.as_ptr().add(i)) };
        let hit = if r.tid != 0 { r.tid == tid } else { glob_match(trim(&r.name), name) };
        if hit {
            mask |= r.mask;
        }
    }
    mask & ALL_METRICS
}

/// Whether any thread rule names threads by name (then naming a thread re-evaluates it).
pub(crate) fn has_name_rules(config: Cfg) -> bool {
    let Some(c) = page(config) else { return false };
    // Safety: as in `thread_mask`.
    unsafe { read_volatile(&(*c).n_thread_rules) != 0 }
}

fn trim(b: &[u8]) -> &[u8] {
    let end = b.iter().position(|&x| x == 0).unwrap_or(b.len());
    b.get(..end).unwrap_or(&[])
}

/// Registration: a new thread starts after every request posted so far, and its (zero)
/// counters are the baseline of the newest snapshot.
pub(crate) fn on_register(config: Cfg, col: &mut ColumnHeader) {
    col.thread_mask = thread_mask(config, col.tid, &col.name);
    col.exit_key = col.owner_key;
    if let Some(c) = page(config) {
        // Safety: the control page is mapped.
        unsafe {
            col.req_seen = read_volatile(&(*c).req_head);
            col.snap_seq = read_volatile(&(*c).last_snapshot);
        }
    }
}

/// A safe point of the thread that owns `col` (GS points at it): put its key back if `stint
/// ctl` changed it, and handle the requests it has not seen.
pub(crate) fn safe_point(config: Cfg, col: &mut ColumnHeader) {
    if col.owner_key != col.exit_key {
        col.owner_key = col.exit_key;
    }
    let Some(c) = page(config) else { return };
    // Safety: the control page is mapped.
    let head = unsafe { read_volatile(&(*c).req_head) };
    if head == col.req_seen {
        return;
    }
    fence(Ordering::Acquire);
    if head < col.req_seen {
        // The page went backwards (rewritten by hand?): start over from here.
        col.req_seen = head;
        return;
    }
    let mut snapshot = None;
    for i in col.req_seen.max(head.saturating_sub(REQ_CAP as u64))..head {
        // Safety: the index is taken modulo REQ_CAP.
        let r: Request = unsafe { read_volatile((*c).requests.as_ptr().add((i % REQ_CAP as u64) as usize)) };
        if r.seq != i + 1 {
            continue; // torn, stale or forged: ignored
        }
        if r.op == REQ_SNAPSHOT {
            snapshot = Some(r.seq);
        }
    }
    if let Some(seq) = snapshot {
        take_snapshot(config, col, seq);
    }
    col.req_seen = head;
}

/// Copy this thread's waits, state times and counters into its baseline, with its open
/// frames and open state counted up to now, then publish `snap_seq`.
fn take_snapshot(config: Cfg, col: &mut ColumnHeader, seq: u64) {
    let n = config.n_points;
    let slots = config.n_counter_slots;
    let base = col as *mut ColumnHeader as *mut u8;
    let now = sys::rdtsc();
    let cpu_now = runtime::cpu_ticks_now(config, col);
    let b = baseline_offset(n, slots) as usize;
    // Safety (whole block): every offset below lies inside this thread's column (its size is
    // `column_size(n, slots)`, which includes the baseline), and only this thread writes it.
    unsafe {
        core::ptr::copy_nonoverlapping(
            base.add(WAITS_OFFSET as usize),
            base.add(b + BASELINE_WAITS as usize),
            WAIT_CAP as usize * size_of::<WaitEntry>(),
        );
        let states = base.add(b + BASELINE_STATES as usize) as *mut u64;
        for s in 0..N_STATES as usize {
            let mut t = col.state_ticks.get(s).copied().unwrap_or(0);
            if s == col.thread_state as usize {
                t = t.saturating_add(now.saturating_sub(col.state_since));
            }
            write_volatile(states.add(s), t);
        }
        let counters = (n as usize) * (slots as usize) * 8;
        core::ptr::copy_nonoverlapping(
            base.add(COUNTERS_OFFSET as usize),
            base.add(b + BASELINE_COUNTERS as usize),
            counters,
        );
        // Open frames: the outermost activation of each point adds its time so far.
        let kept = col.depth.min(SHADOW_CAP);
        let frame = |i: u32| read_volatile(base.add((SHADOW_OFFSET + i * FRAME_SIZE) as usize) as *const Frame);
        let slot = |s: u32, p: u32| {
            base.add(b + BASELINE_COUNTERS as usize + (s as usize * n as usize + p as usize) * 8) as *mut u64
        };
        for d in 0..kept {
            let f = frame(d);
            if f.point >= n || (0..d).any(|e| frame(e).point == f.point) {
                continue;
            }
            if f.bits & metric_bit(METRIC_WALL_TIME) as u32 != 0 && SLOT_WALL_TICKS < slots {
                let p = slot(SLOT_WALL_TICKS, f.point);
                write_volatile(p, read_volatile(p).wrapping_add(now.saturating_sub(f.wall_start)));
            }
            if f.bits & metric_bit(METRIC_CPU_TIME) as u32 != 0 && SLOT_CPU_TICKS < slots {
                let p = slot(SLOT_CPU_TICKS, f.point);
                write_volatile(p, read_volatile(p).wrapping_add(cpu_now.saturating_sub(f.cpu_start)));
            }
        }
    }
    col.snap_tsc = now;
    fence(Ordering::Release);
    // Safety: our own column.
    unsafe { write_volatile(&mut col.snap_seq, seq) };
}

/// Largest control file read.
const CONTROL_MAX: usize = control_file::MAX_TEXT;

/// Apply the control file `path` (STINT_CONTROL) to the gates of a new profile before they go
/// live: `gates` is the profile's gate region, `control` its control page. A file that
/// cannot be read or parsed turns every metric off and says so once on stderr.
pub(crate) fn apply_file(config: Cfg, st: &mut RtState, path: &[u8], gates: *mut u8, control: &mut Control) {
    copy_str(&mut control.control_message, path);
    let buf = match sys::mmap(
        0,
        CONTROL_MAX + 1,
        sys::PROT_READ | sys::PROT_WRITE,
        sys::MAP_PRIVATE | sys::MAP_ANONYMOUS,
        -1,
        0,
    ) {
        Ok(b) => b,
        Err(e) => return reject(config, path, gates, control, b"cannot map a buffer", Some(e)),
    };
    // Safety: CONTROL_MAX + 1 fresh bytes.
    let text = unsafe { core::slice::from_raw_parts_mut(buf as *mut u8, CONTROL_MAX + 1) };
    let len = match read_file(st, path, text) {
        Ok(len) => len,
        Err(e) => {
            reject(config, path, gates, control, b"cannot read", Some(e));
            let _ = sys::munmap(buf, CONTROL_MAX + 1);
            return;
        }
    };
    match control_file::parse(text.get(..len).unwrap_or(&[])) {
        Ok(cf) => {
            apply(config, &cf, gates, control);
            control.control_file = CONTROL_FILE_APPLIED;
        }
        Err(e) => {
            let mut msg = [0u8; 160];
            let mut w = Writer { buf: &mut msg, n: 0 };
            if e.line != 0 {
                w.put(b"line ");
                w.num(e.line as u64);
                w.put(b": ");
            }
            w.put(e.what.as_bytes());
            let n = w.n;
            reject(config, path, gates, control, msg.get(..n).unwrap_or(&[]), None);
        }
    }
    let _ = sys::munmap(buf, CONTROL_MAX + 1);
}

fn read_file(st: &mut RtState, path: &[u8], out: &mut [u8]) -> Result<usize, sys::Errno> {
    let p = runtime::nul_terminated(st, path).ok_or(sys::Errno(36))?; // ENAMETOOLONG
    let fd = sys::open(p, sys::O_RDONLY | sys::O_CLOEXEC, 0)? as i32;
    let mut n = 0;
    while let Some(rest) = out.get_mut(n..).filter(|r| !r.is_empty()) {
        match sys::read(fd, rest) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.0 == 4 => continue, // EINTR
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
fn reject(config: Cfg, path: &[u8], gates: *mut u8, control: &mut Control, why: &[u8], err: Option<sys::Errno>) {
    for p in 0..config.n_points as usize {
        // Safety: the gate region holds n_points bytes.
        unsafe { write_volatile(gates.add(p), 0) };
    }
    control.control_file = CONTROL_FILE_REJECTED;
    let mut msg = [0u8; 256];
    let mut w = Writer { buf: &mut msg, n: 0 };
    w.put(why);
    if let Some(e) = err {
        w.put(b": ");
        w.put(e.name().as_bytes());
    }
    let n = w.n;
    control.control_message = [0; 256];
    copy_str(&mut control.control_message, msg.get(..n).unwrap_or(&[]));
    let mut line = [0u8; 1024];
    let mut w = Writer { buf: &mut line, n: 0 };
    w.put(b"stint: ");
    w.put(runtime::program_name(config));
    w.put(b": control file '");
    w.put(path);
    w.put(b"': ");
    w.put(msg.get(..n).unwrap_or(&[]));
    w.put(b"; running with every metric off\n");
    let n = w.n;
    sys::write_all(2, line.get(..n).unwrap_or(&[]));
}

/// The control file's `on:`, `functions:` and `threads:` applied to the gates and the page.
fn apply(config: Cfg, cf: &control_file::ControlFile, gates: *mut u8, control: &mut Control) {
    let n = config.n_points as usize;
    let info = at::<u8>(config, config.info_rel);
    // Safety: the rewriter emitted names_len bytes of NUL-terminated names.
    let names = unsafe { core::slice::from_raw_parts(at::<u8>(config, config.names_rel), config.names_len as usize) };
    let mut rest = names;
    let calls = metric_bit(METRIC_CALLS);
    for p in 0..n {
        let end = rest.iter().position(|&b| b == 0).unwrap_or(rest.len());
        let name = rest.get(..end).unwrap_or(&[]);
        rest = rest.get(end + 1..).unwrap_or(&[]);
        // Safety: info and gates hold n_points bytes each.
        let (i, g) = unsafe { (read_volatile(info.add(p)), read_volatile(gates.add(p))) };
        let caps = i & !POINT_INFO_WRAP;
        let on = match cf.on {
            Some(m) => (m | GATE_HOOK) & caps,
            None => g,
        };
        let selected = cf.function_selected(name);
        let gate = if i & POINT_INFO_WRAP != 0 {
            // A wrapper's lock metrics are per object, not per function: only its call
            // count follows `functions:`.
            (on & !calls) | if selected { on & calls } else { 0 }
        } else if selected {
            on
        } else {
            0
        };
        // Safety: as above.
        unsafe { write_volatile(gates.add(p), gate) };
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

/// Copy `src` into `dst`, truncated so that a NUL stays at the end.
fn copy_str(dst: &mut [u8], src: &[u8]) {
    let keep = dst.len().saturating_sub(1);
    runtime::copy_into(dst.get_mut(..keep).unwrap_or(&mut []), &[src]);
}

/// A bounded byte writer (no formatting machinery in the image).
struct Writer<'a> {
    buf: &'a mut [u8],
    n: usize,
}

impl Writer<'_> {
    fn put(&mut self, s: &[u8]) {
        for &b in s {
            if let Some(d) = self.buf.get_mut(self.n) {
                *d = b;
                self.n += 1;
            }
        }
    }

    fn num(&mut self, mut v: u64) {
        let mut digits = [0u8; 20];
        let mut k = 0;
        loop {
            if let Some(d) = digits.get_mut(k) {
                *d = b'0' + (v % 10) as u8;
            }
            k += 1;
            v /= 10;
            if v == 0 || k >= digits.len() {
                break;
            }
        }
        for i in (0..k).rev() {
            let d = digits.get(i).copied().unwrap_or(b'0');
            self.put(&[d]);
        }
    }
}
