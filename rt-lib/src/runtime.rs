//! Start-up, thread registration and fork handling: the runtime's slow paths.
//!
//! # Memory
//! ```text
//! program image (rewritten)                 anywhere (kernel's choice)
//! ┌──────────────────────────────┐          ┌──────────────────────────────────┐
//! │ ... original segments ...    │          │ reserved 64 GiB PROT_NONE        │
//! │ RW tail: RtState (1 page)    │          │ ├ profile file [0, file_len)      │
//! │          control region ─────┼─ same ──▶│ │  header | ctl | meta | columns  │
//! │ RX: config, stubs, tramps    │  pages   │ └ grows in place (MAP_FIXED)      │
//! └──────────────────────────────┘          └──────────────────────────────────┘
//! ```
//! The control region of the file is mapped twice: in the big mapping (where `stint`
//! commands see it) and over the rewriter-reserved pages inside the program, so a trampoline
//! tests a gate with one RIP-relative load. Until start-up maps it, those pages are the
//! program's zero-filled bss: every gate is off, so code that runs before our entry stub (a
//! library constructor calling back into the program, an IFUNC resolver) is never measured.
//!
//! # Threads (D8)
//! Every thread's GS base points at a column header. Start-up points the main thread at
//! the dummy header in [`RtState`], whose owner matches no thread; new threads inherit
//! their creator's GS base, which also does not match them (its owner is another thread or
//! the dummy). The first event of a thread therefore misses in the trampoline and lands in
//! [`slow`], which gives it a fresh column under the thread-conscious registration lock.
//! A thread on a stack glibc recycled has the thread pointer of a dead thread but a new tid,
//! so the tid word in the key sends it here too; columns are never reused.
#![allow(unsafe_code)]

use crate::sys::{self, Errno};
use core::mem::size_of;
use core::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};
use stint_layout::{
    align_up, column_size, counter_offset, metric_bit, objects_len, ColumnHeader, Control, FileHeader, Frame, RtConfig,
    CLOCK_SOURCE_PERF_TSC, CLOCK_SOURCE_SYSCALL, COLUMN_HEADER_RESERVED, COLUMN_LIVE, CONFIG_MAGIC, CONTROL_OFFSET,
    ENV_CONTROL, ENV_PROFILE, FILE_MAGIC, FILE_VERSION, FLAG_FORK_CHILD, FLAG_TID_KEY_VERIFIED, FRAME_SIZE,
    GATES_OFFSET, METRIC_CPU_TIME, METRIC_WALL_TIME, OBJ_BUCKETS, OBJ_CAP, PAGE, RT_STATE_SIZE, SHADOW_CAP,
    SHADOW_OFFSET, SLOT_ACTIVE, SLOT_CPU_TICKS, SLOT_WALL_TICKS, STATE_RUN, TIMER_BITS,
};

/// A thread mask with every metric.
pub(crate) const ALL_METRICS: u32 = 0xff;

/// Address space reserved for the profile mapping; the file grows inside it.
const RESERVE: usize = 1 << 36;
/// Columns the file holds at first; it doubles when full.
const INITIAL_COLUMNS: u32 = 16;
const TEMPLATE_MAX: usize = 1024;
const PATH_MAX: usize = 1536;

/// The runtime's writable state, in the rewriter-reserved zero-filled page.
#[repr(C)]
pub struct RtState {
    /// GS target of a thread before it registers: its owner matches no thread.
    dummy: ColumnHeader,
    _dummy_pad: [u8; COLUMN_HEADER_RESERVED as usize - size_of::<ColumnHeader>()],
    /// 1 while a profile is mapped and events are recorded.
    active: u32,
    /// Process the mapping belongs to (a different getpid() means we are a fork child).
    pid: u32,
    fd: i32,
    /// FileHeader flags of this process's profile.
    flags: u32,
    /// Start of the reserved range holding the file mapping.
    base: usize,
    /// Bytes of the file currently mapped at `base`.
    mapped: usize,
    /// The fs-relative tid word matched gettid() in the main thread.
    tid_key_ok: u32,
    template_len: u32,
    /// TSC ticks per second (calibrated once at start, kept by fork children).
    tsc_hz: u64,
    /// Profile path template (`%p` → pid), copied at start so later changes to the
    /// environment strings cannot affect a fork child.
    template: [u8; TEMPLATE_MAX],
    /// Scratch for the expanded path (start-up and fork only: single-threaded).
    path: [u8; PATH_MAX],
    /// Start routines handed from `pthread_create` to the new thread (see `wrap`).
    pub(crate) pending: [crate::wrap::PendingStart; crate::wrap::PENDING_CAP],
    /// Names given to threads that had not registered yet (guarded by `reg_lock`).
    pub(crate) names: [crate::wrap::PendingName; crate::wrap::NAMES_CAP],
    /// STINT_CONTROL, copied at start like the template (a fork child applies it again).
    control_path: [u8; CONTROL_PATH_MAX],
    control_len: u32,
}

const CONTROL_PATH_MAX: usize = 512;

const _: () = assert!(size_of::<RtState>() as u64 <= RT_STATE_SIZE);

/// The program's config block, kept as the raw pointer the stub passed in: memory around
/// it (state, control pages) is reached from this pointer, so it must not be narrowed to a
/// `&RtConfig`, whose provenance covers only the block itself (writes through a pointer
/// derived from a shared reference are undefined behaviour, and LLVM deletes them).
#[derive(Clone, Copy)]
pub struct Cfg(pub *const RtConfig);

impl core::ops::Deref for Cfg {
    type Target = RtConfig;
    fn deref(&self) -> &RtConfig {
        // Safety: the block is valid and read-only for the whole run.
        unsafe { &*self.0 }
    }
}

pub(crate) fn at<T>(config: Cfg, rel: i64) -> *mut T {
    (config.0 as *mut u8).wrapping_offset(rel as isize) as *mut T
}

/// # Safety
/// `config` is the rewriter-emitted block; its `state_rel` names RT_STATE_SIZE writable bytes.
pub(crate) unsafe fn state(config: Cfg) -> &'static mut RtState {
    // Safety: per the contract the state page is ours, zero-initialised and never moved.
    unsafe { &mut *at::<RtState>(config, config.state_rel) }
}

fn bytes(config: Cfg, rel: i64, len: u64) -> &'static [u8] {
    // Safety: the rewriter emitted `len` bytes at `rel` inside the read-only segment.
    unsafe { core::slice::from_raw_parts(at::<u8>(config, rel), len as usize) }
}

/// Start-up, from the entry stub (single-threaded, before the program's entry point).
///
/// # Safety
/// `config` is this program's block; `sp` is the initial process stack.
pub unsafe fn init(config: Cfg, sp: *const usize) {
    if config.magic != CONFIG_MAGIC {
        return;
    }
    // The int3 bytes of the trap tactic are in the code whether or not we measure: their
    // handler goes in first, before anything can fail.
    crate::trap::install(config, at::<u8>(config, config.trap_handler_rel) as usize);
    // Safety: see `state`.
    let st = unsafe { state(config) };
    st.dummy.owner_tp = u64::MAX;
    st.dummy.owner_key = u32::MAX;
    st.dummy.exit_key = u32::MAX;
    st.dummy.self_addr = &st.dummy as *const ColumnHeader as u64;
    if sys::set_gs_base(st.dummy.self_addr as usize).is_err() {
        return; // gates stay off: the program runs unmeasured
    }
    st.pid = sys::getpid();
    if config.tid_offset != 0 {
        // Safety: the rewriter only sets tid_offset for glibc programs, whose thread
        // control block is larger than the offset.
        st.tid_key_ok = (unsafe { sys::fs_u32(config.tid_offset) } == sys::gettid()) as u32;
    }

    // The initial stack: argc, argv[argc], NULL, envp..., NULL, auxv pairs.
    // Safety: the kernel lays out the initial stack this way.
    let (env, control, secure) = unsafe { scan_stack(sp) };
    if secure || sys::setid() {
        // AT_SECURE (setuid, file capabilities): ignore STINT_* and measure nothing.
        if control.is_some() {
            let mut line = [0u8; 256];
            let n = copy_into(
                &mut line,
                &[b"stint: ", program_name(config), b": STINT_CONTROL ignored in a setuid or AT_SECURE process\n"],
            );
            sys::write_all(2, line.get(..n).unwrap_or(&[]));
        }
        return;
    }
    if let Some(c) = control {
        if c.len() >= CONTROL_PATH_MAX {
            warn(config, b"control file path too long", c, None);
            st.template_len = 0; // never measure with metrics the user wanted off
            return;
        }
        st.control_len = copy_into(&mut st.control_path, &[c]) as u32;
    }
    let name = bytes(config, config.name_rel, config.name_len);
    let n = match env {
        Some(v) => copy_into(&mut st.template, &[v]),
        None => copy_into(&mut st.template, &[b"./", name, b".%p.stint"]),
    };
    st.template_len = n as u32;
    create_profile(config, st, 0);
}

/// Finds `STINT_PROFILE` in the environment and AT_SECURE in the auxiliary vector.
///
/// # Safety
/// `sp` is the initial process stack.
unsafe fn scan_stack(sp: *const usize) -> (Option<&'static [u8]>, Option<&'static [u8]>, bool) {
    // Safety (whole function): walking the kernel-built initial stack.
    unsafe {
        let argc = *sp;
        let mut p = sp.add(1 + argc + 1);
        let mut found = None;
        let mut control = None;
        while *p != 0 {
            let s = cstr(*p as *const u8);
            if let Some(v) = env_value(s, ENV_PROFILE) {
                found = Some(v);
            }
            if let Some(v) = env_value(s, ENV_CONTROL) {
                control = Some(v);
            }
            p = p.add(1);
        }
        // In secure mode ld.so deletes unsafe variables (LD_LIBRARY_PATH, ...) by shifting
        // the rest of envp down, which leaves extra NULLs before auxv; auxv's first type is
        // never 0, so skip them.
        while *p == 0 {
            p = p.add(1);
        }
        let mut secure = false;
        while *p != 0 {
            const AT_SECURE: usize = 23;
            if *p == AT_SECURE {
                secure = *p.add(1) != 0;
            }
            p = p.add(2);
        }
        (found, control, secure)
    }
}

/// The value of `NAME=value` if `s` is that variable.
fn env_value(s: &'static [u8], name: &str) -> Option<&'static [u8]> {
    let rest = s.strip_prefix(name.as_bytes())?;
    rest.strip_prefix(b"=")
}

/// The program's name as the rewriter recorded it.
pub(crate) fn program_name(config: Cfg) -> &'static [u8] {
    bytes(config, config.name_rel, config.name_len)
}

/// `path` with a NUL, in the start-up scratch buffer (single-threaded use only).
pub(crate) fn nul_terminated<'a>(st: &'a mut RtState, path: &[u8]) -> Option<&'a [u8]> {
    let n = copy_into(&mut st.path, &[path, b"\0"]);
    (n == path.len() + 1).then(|| st.path.get(..n)).flatten()
}

/// # Safety
/// `p` points to a NUL-terminated string that lives for the whole run.
unsafe fn cstr(p: *const u8) -> &'static [u8] {
    let mut n = 0;
    // Safety: guaranteed by the caller.
    unsafe {
        while *p.add(n) != 0 {
            n += 1;
        }
        core::slice::from_raw_parts(p, n)
    }
}

/// Concatenate `parts` into `buf`, truncating; returns the length.
pub(crate) fn copy_into(buf: &mut [u8], parts: &[&[u8]]) -> usize {
    let mut out = buf.iter_mut();
    let mut n = 0;
    for part in parts {
        for &b in part.iter() {
            match out.next() {
                Some(d) => *d = b,
                None => return n,
            }
            n += 1;
        }
    }
    n
}

/// Expand `%p` (pid) and `%%` in the template into `st.path`, NUL-terminated; returns the
/// length without the NUL. Written without indexing so the image has no panic paths.
fn expand_path(st: &mut RtState, pid: u32) -> Option<usize> {
    let mut digits = [0u8; 10];
    let mut nd = 0;
    let mut v = pid;
    for d in digits.iter_mut() {
        *d = b'0' + (v % 10) as u8;
        nd += 1;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    let tmpl = st.template.get(..st.template_len as usize)?;
    let mut out = st.path.iter_mut();
    let mut n = 0;
    let mut it = tmpl.iter().peekable();
    while let Some(&c) = it.next() {
        let subst = if c == b'%' { it.peek().copied().copied() } else { None };
        match subst {
            Some(b'p') => {
                it.next();
                for &d in digits.iter().take(nd).rev() {
                    *out.next()? = d;
                    n += 1;
                }
            }
            Some(b'%') => {
                it.next();
                *out.next()? = b'%';
                n += 1;
            }
            _ => {
                *out.next()? = c;
                n += 1;
            }
        }
    }
    *out.next()? = 0;
    Some(n)
}

fn warn(config: Cfg, what: &[u8], path: &[u8], err: Option<Errno>) {
    let mut buf = [0u8; 512 + PATH_MAX];
    let name = bytes(config, config.name_rel, config.name_len);
    let e: &[u8] = err.map(|e| e.name().as_bytes()).unwrap_or(b"");
    let sep: &[u8] = if err.is_some() { b": " } else { b"" };
    let n = copy_into(
        &mut buf,
        &[b"stint: ", name, b": ", what, b" '", path, b"'", sep, e, b"; running without measurement\n"],
    );
    sys::write_all(2, buf.get(..n).unwrap_or(&[]));
}

/// Create, size and map a profile file for this process; on success set the gates and
/// mark the runtime active. On failure print one line and leave every gate off.
fn create_profile(config: Cfg, st: &mut RtState, extra_flags: u32) -> bool {
    let pid = sys::getpid();
    st.pid = pid;
    if st.template_len == 0 {
        return false; // STINT_PROFILE= (empty): measurement off by request
    }
    let Some(plen) = expand_path(st, pid) else {
        warn(config, b"profile path too long", st.template.get(..st.template_len as usize).unwrap_or(&[]), None);
        return false;
    };
    // Copy the path so `st` can be borrowed mutably below.
    let mut path_copy = [0u8; PATH_MAX];
    for (d, s) in path_copy.iter_mut().zip(st.path.iter()) {
        *d = *s;
    }
    let (Some(path), Some(path_nul)) = (path_copy.get(..plen), path_copy.get(..plen + 1)) else {
        return false;
    };
    let fd =
        match sys::open(path_nul, sys::O_RDWR | sys::O_CREAT | sys::O_EXCL | sys::O_NOFOLLOW | sys::O_CLOEXEC, 0o600) {
            Ok(fd) => fd as i32,
            Err(e) => {
                warn(config, b"cannot create profile", path, Some(e));
                return false;
            }
        };

    let n_points = config.n_points;
    let ctl_off = GATES_OFFSET;
    let ctl_len = config.ctl_len;
    let meta_off = ctl_off + ctl_len;
    let meta_len = config.meta_len;
    let objects_off = align_up(meta_off + meta_len, PAGE);
    let columns_off = objects_off + objects_len(OBJ_BUCKETS, OBJ_CAP);
    let col_size = column_size(n_points, config.n_counter_slots);
    let file_len = columns_off + INITIAL_COLUMNS as u64 * col_size;

    let fail = |st: &mut RtState, what: &[u8], e: Errno| {
        warn(config, what, path, Some(e));
        // We created it (O_EXCL): remove it rather than leave a file no reader accepts.
        sys::unlink(path_nul);
        sys::close(fd);
        st.active = 0;
        false
    };
    if let Err(e) = sys::ftruncate(fd, file_len) {
        return fail(st, b"cannot size profile", e);
    }
    let base = match sys::mmap(
        0,
        RESERVE,
        sys::PROT_NONE,
        sys::MAP_PRIVATE | sys::MAP_ANONYMOUS | sys::MAP_NORESERVE,
        -1,
        0,
    ) {
        Ok(b) => b,
        Err(e) => return fail(st, b"cannot reserve address space for profile", e),
    };
    let rw = sys::PROT_READ | sys::PROT_WRITE;
    if let Err(e) = sys::mmap(base, file_len as usize, rw, sys::MAP_SHARED | sys::MAP_FIXED, fd, 0) {
        let _ = sys::munmap(base, RESERVE);
        return fail(st, b"cannot map profile", e);
    }
    st.base = base;
    st.mapped = file_len as usize;
    st.fd = fd;

    // Safety: the header page is mapped read-write at `base` and nobody else writes it yet.
    let hdr = unsafe { &mut *(base as *mut FileHeader) };
    hdr.version = FILE_VERSION;
    hdr.header_size = size_of::<FileHeader>() as u32;
    hdr.pid = pid;
    hdr.ppid = sys::getppid();
    st.flags = extra_flags | if st.tid_key_ok != 0 { FLAG_TID_KEY_VERIFIED } else { 0 };
    hdr.flags = st.flags;
    hdr.n_points = n_points;
    hdr.n_metrics = config.n_metrics;
    hdr.n_counter_slots = config.n_counter_slots;
    hdr.ctl_offset = ctl_off;
    hdr.ctl_len = ctl_len;
    hdr.meta_offset = meta_off;
    hdr.meta_len = meta_len;
    hdr.columns_offset = columns_off;
    hdr.column_size = col_size;
    hdr.n_columns = 0;
    hdr.capacity_columns = INITIAL_COLUMNS;
    hdr.start_realtime_ns = sys::clock_ns(sys::CLOCK_REALTIME);
    hdr.start_monotonic_ns = sys::clock_ns(sys::CLOCK_MONOTONIC);
    hdr.tid_offset = config.tid_offset;
    hdr.file_len = file_len;
    if st.tsc_hz == 0 {
        st.tsc_hz = calibrate_tsc();
    }
    hdr.tsc_hz = st.tsc_hz;
    hdr.objects_offset = objects_off;
    hdr.obj_buckets = OBJ_BUCKETS;
    hdr.obj_cap = OBJ_CAP;
    hdr.start_tsc = sys::rdtsc();
    hdr.control_offset = CONTROL_OFFSET;
    // Safety: the control page lies inside the mapped file, after the header page.
    let control = unsafe { &mut *((base + CONTROL_OFFSET as usize) as *mut Control) };
    control.new_thread_mask = ALL_METRICS;
    // Safety: both regions lie inside the mapped file; the sources are in our segment.
    unsafe {
        let meta = bytes(config, config.meta_rel, meta_len);
        core::ptr::copy_nonoverlapping(meta.as_ptr(), (base + meta_off as usize) as *mut u8, meta.len());
        let gates = bytes(config, config.gates_rel, n_points as u64); // one gate byte per point
        core::ptr::copy_nonoverlapping(gates.as_ptr(), (base + ctl_off as usize) as *mut u8, gates.len());
    }
    if st.control_len != 0 {
        let mut path = [0u8; CONTROL_PATH_MAX];
        let n = copy_into(&mut path, &[st.control_path.get(..st.control_len as usize).unwrap_or(&[])]);
        let gates = (base + ctl_off as usize) as *mut u8;
        crate::control::apply_file(config, st, path.get(..n).unwrap_or(&[]), gates, control);
    }
    st.active = 1;
    fence(Ordering::Release);
    // Now the gates go live: map the control region over the reserved pages in the program.
    let ctl_addr = at::<u8>(config, config.ctl_rel) as usize;
    if let Err(e) = sys::mmap(ctl_addr, ctl_len as usize, rw, sys::MAP_SHARED | sys::MAP_FIXED, fd, ctl_off) {
        st.active = 0;
        let _ = sys::munmap(base, RESERVE);
        return fail(st, b"cannot map control region of profile", e);
    }
    // Safety: publishing the header: readers check the magic last.
    unsafe { core::ptr::write_volatile(&mut hdr.magic, FILE_MAGIC) };
    true
}

/// Outcome of taking a thread-conscious lock (D7, seeds/000 Table 1).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum TcAcquire {
    /// Acquired; release it.
    Yes,
    /// This thread already holds it: a signal handler interrupted the runtime.
    SelfHeld,
}

/// A lock that knows its holder: 0 or the holder's tid.
pub struct TcLock<'a>(&'a AtomicU32);

impl<'a> TcLock<'a> {
    pub fn new(word: &'a AtomicU32) -> Self {
        TcLock(word)
    }

    /// Spin until acquired, unless this thread holds it already.
    pub fn acquire(&self, tid: u32) -> TcAcquire {
        let mut spins = 0u32;
        loop {
            match self.0.compare_exchange_weak(0, tid, Ordering::Acquire, Ordering::Relaxed) {
                Ok(_) => return TcAcquire::Yes,
                Err(holder) if holder == tid => return TcAcquire::SelfHeld,
                Err(_) => {
                    spins += 1;
                    if spins.is_multiple_of(64) {
                        sys::sched_yield();
                    } else {
                        core::hint::spin_loop();
                    }
                }
            }
        }
    }

    pub fn release(&self) {
        self.0.store(0, Ordering::Release);
    }
}

/// The slow path of a point; see the module documentation.
///
/// # Safety
/// `config` is this program's block, and start-up has run.
pub unsafe fn slow(config: Cfg, point: u32) -> bool {
    // Safety: see `state`.
    let st = unsafe { state(config) };
    if st.active == 0 {
        return false;
    }
    let pid = sys::getpid();
    if pid != st.pid {
        fork_child(config, st);
        if st.active == 0 {
            return false;
        }
    }
    let tp = sys::thread_pointer();
    let tid = sys::gettid();
    if refresh_if_owner(config, st, tp, tid, pid) {
        return true;
    }
    let base = st.base;
    // Safety: the header lies at the start of the mapped file.
    let hdr = unsafe { &mut *(base as *mut FileHeader) };
    // Safety: reg_lock is a naturally aligned u32 in the shared mapping.
    let word = unsafe { AtomicU32::from_ptr(&mut hdr.reg_lock) };
    let lock = TcLock::new(word);
    if lock.acquire(tid) == TcAcquire::SelfHeld {
        // Safety: aligned u64 in the mapping.
        unsafe { AtomicU64::from_ptr(&mut hdr.skipped_reentrant) }.fetch_add(1, Ordering::Relaxed);
        return false;
    }
    // A signal handler may have registered this thread between our check and the lock.
    if refresh_if_owner(config, st, tp, tid, pid) {
        lock.release();
        return true;
    }
    let idx = hdr.n_columns;
    if idx >= hdr.capacity_columns && !grow(st, hdr) {
        // Safety: aligned u64 in the mapping.
        unsafe { AtomicU64::from_ptr(&mut hdr.lost_threads) }.fetch_add(1, Ordering::Relaxed);
        lock.release();
        return false;
    }
    let col_addr = base + (hdr.columns_offset + idx as u64 * hdr.column_size) as usize;
    // Safety: column `idx` lies inside the mapped file (capacity checked above) and no
    // other thread touches an unpublished column.
    let col = unsafe { &mut *(col_addr as *mut ColumnHeader) };
    col.self_addr = col_addr as u64;
    col.owner_tp = tp;
    col.owner_key = key(config, tp);
    col.tid = tid;
    col.index = idx;
    col.pid = pid;
    col.first_point = point;
    col.registered_monotonic_ns = sys::clock_ns(sys::CLOCK_MONOTONIC);
    timer_setup(col, st.tsc_hz);
    // The thread record: running since now, named by its comm (or a name given to it
    // before it got here; we hold reg_lock, which `pthread_setname_np`'s wrapper takes).
    col.thread_state = STATE_RUN;
    col.state_object = u32::MAX;
    col.state_since = sys::rdtsc();
    col.last_tsc = col.state_since;
    sys::thread_name(&mut col.name);
    crate::wrap::take_pending_name(st, tp, &mut col.name);
    crate::wrap::take_pending_start(config, st, tp, col);
    crate::control::on_register(config, col);
    // Safety: aligned u32 fields in the mapping; release publishes the column's contents.
    unsafe {
        AtomicU32::from_ptr(&mut col.state).store(COLUMN_LIVE, Ordering::Release);
        AtomicU32::from_ptr(&mut hdr.n_columns).store(idx + 1, Ordering::Release);
    }
    let ok = sys::set_gs_base(col_addr).is_ok();
    lock.release();
    ok
}

/// TSC ticks per second, measured against CLOCK_MONOTONIC over about a millisecond (the
/// system-call jitter of a few hundred nanoseconds gives well under 0.1 % error).
fn calibrate_tsc() -> u64 {
    const SPAN_NS: u64 = 1_000_000;
    let (Some((m0, t0)), mut last) = (clock_pair(), None) else {
        return 0;
    };
    while let Some((m1, t1)) = clock_pair() {
        last = Some((m1, t1));
        if m1.wrapping_sub(m0) >= SPAN_NS {
            break;
        }
    }
    let Some((m1, t1)) = last else {
        return 0;
    };
    ((t1.wrapping_sub(t0) as u128 * 1_000_000_000) / m1.wrapping_sub(m0).max(1) as u128) as u64
}

/// CLOCK_MONOTONIC and the TSC at the same instant: the clock read bracketed by two TSC
/// reads, the narrowest bracket of eight (a thread preempted inside the bracket would pair
/// the clock with a TSC value microseconds off). `None` if the clock cannot be read.
fn clock_pair() -> Option<(u64, u64)> {
    let mut best: Option<(u64, u64, u64)> = None; // (width, mono, tsc)
    for _ in 0..8 {
        let a = sys::rdtsc();
        let m = sys::clock_ns(sys::CLOCK_MONOTONIC);
        let b = sys::rdtsc();
        if m == 0 {
            return None;
        }
        let w = b.wrapping_sub(a);
        if best.is_none_or(|(bw, _, _)| w < bw) {
            best = Some((w, m, a + w / 2));
        }
    }
    best.map(|(_, m, t)| (m, t))
}

/// Give a new column its CPU clock (D11): a perf task-clock page whose `lock` word moves at
/// every scheduling of the thread, or (perf refused) a sequence pointer that never matches,
/// so every timer event takes the system call.
fn timer_setup(col: &mut ColumnHeader, tsc_hz: u64) {
    col.sync_ticks = tsc_hz / 1000 * SYNC_MS;
    match sys::perf_task_clock_page() {
        Ok(page) if tsc_hz != 0 => {
            col.seq_ptr = (page + sys::PERF_PAGE_LOCK_OFFSET) as u64;
            col.clock_source = CLOCK_SOURCE_PERF_TSC;
        }
        other => {
            if let Ok(page) = other {
                let _ = sys::munmap(page, 4096);
            }
            col.seq_never = 1;
            col.seq = 0;
            col.seq_ptr = &col.seq_never as *const u32 as u64;
            col.clock_source = CLOCK_SOURCE_SYSCALL;
        }
    }
    resync(col, tsc_hz);
}

/// Milliseconds of TSC extrapolation after which a timer event re-synchronises the CPU clock
/// although the thread was not scheduled out (`ColumnHeader::sync_ticks`): bounds the error
/// hypervisor steal time causes to what it steals in this window, at one system call per
/// window at most.
const SYNC_MS: u64 = 1;

/// Re-synchronise the thread's CPU clock: `cpu_off = TSC − CPU time in ticks`, read inside one
/// scheduling period (the sequence word is unchanged across the read).
fn resync(col: &mut ColumnHeader, tsc_hz: u64) {
    let seq_ptr = col.seq_ptr as *const u32;
    // Safety: seq_ptr points at the mapped perf page's lock word or at `seq_never`.
    let read_seq = || unsafe { core::ptr::read_volatile(seq_ptr) };
    let mut tries = 0;
    loop {
        let s = read_seq();
        let ns = sys::clock_ns(sys::CLOCK_THREAD_CPUTIME_ID);
        let t = sys::rdtsc();
        tries += 1;
        if read_seq() == s || tries >= 4 {
            col.cpu_off = t.wrapping_sub(ns_to_ticks(ns, tsc_hz));
            col.sync_tsc = t;
            if col.clock_source == CLOCK_SOURCE_PERF_TSC {
                col.seq = s;
            }
            col.resyncs = col.resyncs.wrapping_add(1);
            return;
        }
    }
}

/// The thread's CPU clock now, in TSC ticks (as frames record it); 0 before its first timer
/// event.
pub(crate) fn cpu_ticks_now(config: Cfg, col: &mut ColumnHeader) -> u64 {
    if col.clock_source == stint_layout::CLOCK_SOURCE_NONE {
        return 0;
    }
    // Safety: see `state`; the seq pointer is the perf page's lock word or `seq_never`.
    let (hz, seq) = unsafe { (state(config).tsc_hz, core::ptr::read_volatile(col.seq_ptr as *const u32)) };
    if seq != col.seq || sys::rdtsc().wrapping_sub(col.sync_tsc) > col.sync_ticks {
        resync(col, hz);
    }
    sys::rdtsc().wrapping_sub(col.cpu_off)
}

fn ns_to_ticks(ns: u64, tsc_hz: u64) -> u64 {
    (ns as u128 * tsc_hz as u128 / 1_000_000_000) as u64
}

/// The slow path of the timer routines (see `codegen::timer_routine` in the rewriter): the
/// general case of entering (`op` 0) or leaving (`op` 1) `point` with stack pointer `sp` at
/// TSC `tsc`. Runs with the column's `busy` flag set, on the thread's own column.
///
/// # Safety
/// `config` is this program's block, start-up has run, and GS points at this thread's live
/// column (the trampoline checked it).
pub unsafe fn timer(config: Cfg, op: u32, point: u32, sp: u64, tsc: u64) {
    // Safety: see `state`.
    let st = unsafe { state(config) };
    let n = config.n_points;
    if point >= n || st.active == 0 {
        return;
    }
    // Safety: GS points at this thread's column, which lies in the mapped file.
    let base = unsafe { sys::gs_self() } as usize;
    // Safety: as above; only this thread writes its column.
    let col = unsafe { &mut *(base as *mut ColumnHeader) };
    // A safe point (the routine sends a thread here when `stint ctl` changed its key).
    crate::control::safe_point(config, col);
    // CPU time of this instant: `tsc` was read before the routine looked at the sequence
    // word, so after a re-synchronisation it belongs to the previous scheduling period and
    // would be off by the time the thread spent descheduled; read the TSC again.
    // The system call of a re-synchronisation is where the scheduler likes to preempt (reading
    // the thread's CPU clock updates its runtime, and a used-up slice is noticed there): an
    // exit then ends its frames after it, an entry began before it, so the time belongs to
    // the function either way, as it does for the program's own clock reads around the call.
    let mut cpu_tsc = tsc;
    let mut tsc = tsc;
    // Safety: the seq pointer is the perf page's lock word or `seq_never`.
    if unsafe { core::ptr::read_volatile(col.seq_ptr as *const u32) } != col.seq
        || tsc.wrapping_sub(col.sync_tsc) > col.sync_ticks
    {
        resync(col, st.tsc_hz);
        cpu_tsc = sys::rdtsc();
        if op == TIMER_OP_EXIT {
            tsc = cpu_tsc;
        }
    }
    let cpu_now = cpu_tsc.wrapping_sub(col.cpu_off);
    let slot = |slot: u32, p: u32| (base + counter_offset(n, slot, p) as usize) as *mut u64;
    let frame = |i: u32| (base + (SHADOW_OFFSET + i * FRAME_SIZE) as usize) as *mut Frame;
    // Close the top frame: lower the point's active count; the outermost adds its time.
    let close = |col: &mut ColumnHeader| {
        col.depth -= 1;
        // Safety: depth < SHADOW_CAP here, so the frame lies in the column's shadow stack.
        let f = unsafe { *frame(col.depth) };
        if f.point >= n {
            return; // a corrupted frame: drop it
        }
        // Safety: counters of a point < n lie inside the column.
        unsafe {
            let active = slot(SLOT_ACTIVE, f.point);
            *active = (*active).saturating_sub(1);
            if *active == 0 {
                if f.bits & metric_bit(METRIC_WALL_TIME) as u32 != 0 {
                    *slot(SLOT_WALL_TICKS, f.point) += tsc.saturating_sub(f.wall_start);
                }
                if f.bits & metric_bit(METRIC_CPU_TIME) as u32 != 0 {
                    *slot(SLOT_CPU_TICKS, f.point) += cpu_now.saturating_sub(f.cpu_start);
                }
            }
        }
    };
    // Frames beyond the kept ones: an exit below the deepest kept frame belongs to one of
    // them; at or above it, they were all left by exception or longjmp.
    if col.depth > SHADOW_CAP {
        // Safety: frame CAP-1 is inside the shadow stack.
        let deepest = unsafe { (*frame(SHADOW_CAP - 1)).sp };
        if sp < deepest {
            if op == TIMER_OP_EXIT {
                col.depth -= 1;
            } else {
                col.depth += 1;
                col.shadow_overflow += 1;
            }
            return;
        }
        col.abandoned_frames += (col.depth - SHADOW_CAP) as u64;
        col.depth = SHADOW_CAP;
    }
    // Frames whose stack pointer lies below ours (for an entry: at or below) were left
    // without their exit: close them with the time up to now.
    while col.depth > 0 {
        // Safety: 0 < depth ≤ SHADOW_CAP.
        let top = unsafe { *frame(col.depth - 1) };
        let abandoned = if op == TIMER_OP_ENTER { top.sp <= sp } else { top.sp < sp };
        if !abandoned {
            break;
        }
        close(col);
        col.abandoned_frames += 1;
    }
    if op == TIMER_OP_EXIT {
        // Safety: as above.
        let matched =
            col.depth > 0 && unsafe { (*frame(col.depth - 1)).sp == sp && (*frame(col.depth - 1)).point == point };
        if matched {
            close(col);
        } else {
            col.unmatched_exits += 1;
        }
        return;
    }
    if col.depth >= SHADOW_CAP {
        col.depth += 1;
        col.shadow_overflow += 1;
        return;
    }
    let ctl = at::<u8>(config, config.ctl_rel);
    // Safety: point < n_points ≤ ctl_len; the control region is mapped.
    let bits = unsafe { core::ptr::read_volatile(ctl.add(point as usize)) } & TIMER_BITS & col.thread_mask as u8;
    // Safety: depth < SHADOW_CAP; counters of point < n lie inside the column.
    unsafe {
        *frame(col.depth) = Frame { sp, point, bits: bits as u32, wall_start: tsc, cpu_start: cpu_now };
        *slot(SLOT_ACTIVE, point) += 1;
    }
    col.depth += 1;
}

const TIMER_OP_ENTER: u32 = 0;
const TIMER_OP_EXIT: u32 = 1;

/// The hot-path key word for this thread: what the trampoline compares with `owner_key`.
fn key(config: Cfg, tp: u64) -> u32 {
    if config.tid_offset != 0 {
        // Safety: tid_offset is only set for glibc programs (see init).
        unsafe { sys::fs_u32(config.tid_offset) }
    } else {
        tp as u32
    }
}

/// This thread's column, registering the thread if needed (`None`: not measuring).
///
/// # Safety
/// `config` is this program's block and start-up has run.
pub(crate) unsafe fn own_column(config: Cfg, point: u32) -> Option<*mut ColumnHeader> {
    if let Some(c) = registered_column(config) {
        return Some(c);
    }
    // Safety: forwarded contract.
    if !unsafe { slow(config, point) } {
        return None;
    }
    // Safety: `slow` moved GS to this thread's column.
    Some(unsafe { sys::gs_self() } as *mut ColumnHeader)
}

/// This thread's column if it has registered (never registers).
pub(crate) fn registered_column(config: Cfg) -> Option<*mut ColumnHeader> {
    // Safety: see `state`.
    let st = unsafe { state(config) };
    if st.active == 0 {
        return None;
    }
    let tp = sys::thread_pointer();
    // Safety: every thread's GS base points at a column header.
    let cur = unsafe { sys::gs_self() } as *mut ColumnHeader;
    if cur.is_null() || cur as u64 == st.dummy.self_addr {
        return None;
    }
    // Safety: `cur` is a column in our mapping.
    let c = unsafe { &*cur };
    (c.owner_tp == tp && c.owner_key == key(config, tp)).then_some(cur)
}

/// The mapped profile's header, if measuring.
pub(crate) fn file_header(config: Cfg) -> Option<*mut FileHeader> {
    // Safety: see `state`.
    let st = unsafe { state(config) };
    (st.active != 0 && st.base != 0).then_some(st.base as *mut FileHeader)
}

pub(crate) fn tsc_hz(config: Cfg) -> u64 {
    // Safety: see `state`.
    unsafe { state(config) }.tsc_hz
}

/// The newest live column of this process owned by thread pointer `tp` among the last
/// `limit` columns (a `pthread_t` names the thread whose stack it is; glibc recycles
/// stacks, so the newest is the current one).
pub(crate) fn find_column(config: Cfg, tp: u64, limit: u32) -> Option<*mut ColumnHeader> {
    let hdr = file_header(config)?;
    // Safety: see `state`; the header is mapped.
    let (st, h) = unsafe { (state(config), &*hdr) };
    // Safety: aligned u32 in the mapping.
    let n = unsafe { AtomicU32::from_ptr(&(*hdr).n_columns as *const u32 as *mut u32) }.load(Ordering::Acquire);
    for i in (n.saturating_sub(limit)..n).rev() {
        let addr = st.base + (h.columns_offset + i as u64 * h.column_size) as usize;
        // Safety: columns below n_columns are published and mapped.
        let c = unsafe { &*(addr as *const ColumnHeader) };
        if c.owner_tp == tp && c.pid == st.pid {
            return Some(addr as *mut ColumnHeader);
        }
    }
    None
}

/// The registration lock (`FileHeader::reg_lock`), for the wrappers that look at other
/// threads' columns.
pub(crate) fn reg_lock(config: Cfg) -> Option<TcLock<'static>> {
    let hdr = file_header(config)?;
    // Safety: aligned u32 in the mapping, which lives as long as the process.
    Some(TcLock::new(unsafe { AtomicU32::from_ptr(&mut (*hdr).reg_lock) }))
}

/// If GS already points at this thread's own column, refresh its key word and say so.
fn refresh_if_owner(config: Cfg, st: &RtState, tp: u64, tid: u32, pid: u32) -> bool {
    // Safety: every thread's GS base points at a column header (init set the main thread's;
    // others inherit and only ever move to new columns).
    let cur = unsafe { sys::gs_self() } as *mut ColumnHeader;
    if cur as u64 == st.dummy.self_addr || cur.is_null() {
        return false;
    }
    // Safety: `cur` is a column in our mapping (fork_child resets GS before unmapping).
    let col = unsafe { &mut *cur };
    if col.owner_tp == tp && col.tid == tid && col.pid == pid {
        col.owner_key = key(config, tp);
        col.exit_key = col.owner_key;
        // Our own column and no frame half written: a safe point (`stint ctl` may have
        // changed the key to bring us here).
        crate::control::safe_point(config, col);
        return true;
    }
    false
}

/// Double the number of columns the file holds, mapping the new part in place.
fn grow(st: &mut RtState, hdr: &mut FileHeader) -> bool {
    let new_cap = hdr.capacity_columns.saturating_mul(2);
    let new_len = hdr.columns_offset + new_cap as u64 * hdr.column_size;
    if new_len as usize > RESERVE || sys::ftruncate(st.fd, new_len).is_err() {
        return false;
    }
    let old = st.mapped;
    let prot = sys::PROT_READ | sys::PROT_WRITE;
    if sys::mmap(st.base + old, new_len as usize - old, prot, sys::MAP_SHARED | sys::MAP_FIXED, st.fd, old as u64)
        .is_err()
    {
        return false;
    }
    st.mapped = new_len as usize;
    hdr.capacity_columns = new_cap;
    hdr.file_len = new_len;
    true
}

/// We are the child of a fork: the mappings are still the parent's file. Detach from it
/// (private zero gates, GS back to the dummy) and start a profile of our own.
fn fork_child(config: Cfg, st: &mut RtState) {
    let ctl_addr = at::<u8>(config, config.ctl_rel) as usize;
    let rw = sys::PROT_READ | sys::PROT_WRITE;
    let private = sys::MAP_PRIVATE | sys::MAP_ANONYMOUS | sys::MAP_FIXED;
    if sys::mmap(ctl_addr, config.ctl_len as usize, rw, private, -1, 0).is_err() {
        // Cannot detach the gates from the parent's file: never touch it again.
        st.active = 0;
        return;
    }
    st.active = 0;
    let _ = sys::set_gs_base(st.dummy.self_addr as usize);
    let _ = sys::munmap(st.base, RESERVE);
    sys::close(st.fd);
    st.base = 0;
    st.mapped = 0;
    create_profile(config, st, FLAG_FORK_CHILD);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tc_lock_reports_self() {
        let w = AtomicU32::new(0);
        let l = TcLock::new(&w);
        assert_eq!(l.acquire(7), TcAcquire::Yes);
        assert_eq!(l.acquire(7), TcAcquire::SelfHeld);
        l.release();
        assert_eq!(w.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn path_template_expands_pid() {
        let mut st: RtState = unsafe { core::mem::zeroed() };
        let n = copy_into(&mut st.template, &[b"/tmp/x.%p.%%.stint"]);
        st.template_len = n as u32;
        let len = expand_path(&mut st, 4242).unwrap();
        assert_eq!(&st.path[..len], b"/tmp/x.4242.%.stint");
        assert_eq!(st.path[len], 0);
    }
}
