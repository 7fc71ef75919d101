//! Wrappers of the thread-library functions (D4): which thread waits, on which object, for
//! how long, and the thread records (creator, start routine, name, end).
//!
//! # How a call gets here
//! The rewriter redirects the PLT stub of each wrapped import to a thunk:
//! ```text
//! caller: call pthread_mutex_lock@plt ─▶ stub: jmp thunk ─▶ thunk: gate off? jmp [GOT]
//!                                                                 on:  r8 = [rsp], r9 = site
//!                                                                      jmp stint_rt_wrap
//! ```
//! `stint_rt_wrap` is an ordinary function of the caller: it records, calls the real
//! function through the GOT slot (so lazy binding keeps working: an unresolved slot leads to
//! the resolver, which fixes the slot and runs the function), records again and returns to
//! the caller.
//!
//! Two fast paths of a dynamic program's synchronisation functions skip most of that
//! (`codegen::wrap_thunk` in the rewriter): when the registered thread measures only
//! `calls` at the point, the thunk counts the call itself and jumps to the real function
//! (no runtime call); when it measures only `calls`, `lock_wait` and `lock_hold` at a mutex
//! lock or unlock, the thunk jumps to `stint_rt_wrap_lock` ([`wrap_lock`]), which handles
//! the uncontended case with one TSC read and a look into the thread's own wait table, and
//! hands everything else to [`wrap`]; a condition signal or broadcast and `sem_post` go
//! there too (nothing waits or is held: the call and the object's first use). Nothing on the program's stack is changed (D1); unwinding through the
//! wrapper's frame (pthread_cancel, pthread_exit) uses rt-lib's FDEs (D5).
//!
//! # What is recorded (only on the calling thread's own column, no atomics)
//! - `lock_wait`: TSC around the blocking call, per (thread, object) in the column's wait
//!   table, with the calls that acquired (`count`) and those that found the object busy
//!   (`contended`: a glibc mutex whose lock word was non-zero; for the other kinds a wait
//!   longer than `CONTENDED_NS`); and the thread's state (RUN → BLOCKED_* → RUN).
//! - `lock_hold`: a small stack of held mutexes / rwlocks; the unlock adds the hold time.
//!   A condition wait gives its mutex back for the wait, so the wait is not held time.
//! - `state_trace`: every state transition into the column's ring.
//! - Threads: `pthread_create` passes our start shim and a slot holding the real routine;
//!   the new thread registers at once and records its creator, routine and comm, and at
//!   the end how it ended. `pthread_join` learns of cancelled threads (`PTHREAD_CANCELED`).
//!
//! The sync-object table is shared: lookups walk a bucket's chain without locking (entries
//! are complete before the chain points at them); inserts take the bucket's
//! thread-conscious lock, and a thread that already holds it (a signal handler interrupted
//! the insert) skips the event (D7, seeds/000 Figure 4).
//!
//! Never touched: errno (raw system calls only, and none between the real call's return
//! and ours), the program's locks, its memory other than the objects' first word (read).
//!
//! The process functions (`exit`, `wait*`, D22) come through the same thunks and are handed
//! to [`process_fn`] at once: they record how processes end and measure nothing.
//! `__libc_start_main` and `syscall` have thunks of their own (codegen's `start_main_thunk`
//! and `syscall_thunk`), which call [`main_hook`] through `stint_rt_main`.
//!
//! The signal functions of a program with trap sites (issue 12) are handed to `signals`.
//!
//! Layering: uses `sys`, `state`, `column`, `control`, `process`, `threads`, `signals` and
//! `calib` (the calibration run again as the program ends).
#![allow(unsafe_code)]

use crate::column::Column;
use crate::control;
use crate::state::{Rt, TcAcquire, TcLock};
use crate::sys;
use crate::threads;
use core::sync::atomic::{compiler_fence, AtomicU32, AtomicU64, Ordering};
use stint_layout::*;

/// The real function, called with the wrapper's four argument registers (the wrapped
/// functions take at most four; the extra ones are ignored by the callee).
type Real = unsafe extern "C" fn(usize, usize, usize, usize) -> usize;

const EBUSY: i32 = 16;
const ETIMEDOUT: i32 = 110;
/// `PTHREAD_CANCELED`, `(void *) -1`.
const PTHREAD_CANCELED: usize = usize::MAX;
/// `PTHREAD_BARRIER_SERIAL_THREAD`.
const BARRIER_SERIAL: i32 = -1;
/// A wait longer than this counts as contended (kinds other than mutexes).
const CONTENDED_NS: u64 = 1000;
/// What the dynamic linker's resolver may take on an import's first call.
const RESOLVER_NS: u64 = 200_000;

const fn bit(m: u32) -> u8 {
    metric_bit(m)
}
const WAIT: u8 = bit(METRIC_LOCK_WAIT);
const HOLD: u8 = bit(METRIC_LOCK_HOLD);
const TRACE: u8 = bit(METRIC_STATE_TRACE);

/// One wrapped call on one thread. It borrows the entry's context and column rather than
/// holding copies: moving those small structs into it cost a store-forwarding stall per
/// call, 20 % of an uncontended lock/unlock pair in `tests/bench.sh`.
struct Ev<'r, 'a> {
    rt: &'r Rt<'a>,
    /// The calling thread's own column.
    col: &'r mut Column<'a>,
    gate: u8,
    /// The caller's return address (run time).
    ra: usize,
    tid: u32,
    /// The dynamic linker resolves the import during this call: its time is not a wait.
    resolving: bool,
}

impl Ev<'_, '_> {
    fn busy(&mut self) -> &AtomicU32 {
        // Safety: an aligned u32 of the thread's own column header; the timer routines of a
        // signal handler on this thread read it (same thread: no data race).
        unsafe { AtomicU32::from_ptr(&raw mut self.col.h.busy) }
    }

    /// Start bookkeeping on the column; false if a signal handler interrupted bookkeeping
    /// (or a timer routine) on this thread: the event is skipped and counted (D7).
    fn begin(&mut self) -> bool {
        if self.busy().load(Ordering::Relaxed) != 0 {
            self.col.h.wrap_skipped = self.col.h.wrap_skipped.wrapping_add(1);
            return false;
        }
        self.busy().store(1, Ordering::Relaxed);
        compiler_fence(Ordering::SeqCst);
        true
    }

    fn end(&mut self) {
        compiler_fence(Ordering::SeqCst);
        self.busy().store(0, Ordering::Relaxed);
    }

    fn tracks_state(&self) -> bool {
        self.gate & (WAIT | TRACE) != 0
    }

    /// The wait-table entry of `obj` (`None`: no object, or the table is full).
    fn wait_entry(&mut self, obj: Option<u32>, kind: u32) -> Option<&mut WaitEntry> {
        let obj = obj?;
        let home = Objects::of(self.rt)?.address(obj)?;
        self.col.wait_entry(obj, kind, home)
    }

    fn push_held(&mut self, obj: Option<u32>, now: u64) {
        if let Some(obj) = obj {
            self.col.push_held(obj, now);
        }
    }

    fn pop_held(&mut self, obj: Option<u32>) -> Option<u64> {
        self.col.pop_held(obj?)
    }
}

/// See `stint_rt_wrap`.
///
/// # Safety
/// `site` is a rewriter-emitted descriptor, whose `config_rel` names this program's
/// config block (the contract of `Rt::enter`); `a` are the caller's arguments.
pub unsafe fn wrap(a: [usize; 4], ra: usize, site: *const WrapSite) -> usize {
    // Safety: the descriptor is in our read-only segment.
    let s = unsafe { &*site };
    let base = site as *const u8;
    // Safety: per the contract.
    let rt = unsafe { Rt::enter(base.wrapping_offset(s.config_rel as isize) as *const RtConfig) };
    let real_at = base.wrapping_offset(s.real_rel as isize);
    let real_addr = if s.indirect != 0 {
        // Safety: a GOT slot of the program (resolved, or the lazy-binding entry).
        unsafe { core::ptr::read_volatile(real_at as *const usize) }
    } else {
        real_at as usize
    };
    // A call through a slot lazy binding has not resolved yet runs the resolver first.
    let resolving = s.lazy_rel != 0 && real_addr == base.wrapping_offset(s.lazy_rel as isize) as usize;
    // Safety: the address of the real function.
    let real: Real = unsafe { core::mem::transmute::<usize, Real>(real_addr) };
    if let Some(f) = ProcessFn::from_u32(s.func) {
        return process_fn(&rt, f, a, real);
    }
    // Signal functions (ids from 96; one compare on the thread-library path).
    if s.func >= SignalFn::Sigprocmask as u32 {
        if let Some(f) = SignalFn::from_u32(s.func) {
            return crate::signals::call(rt.st, &rt.cfg, f, a, real);
        }
    }
    // Safety: calling the real function with the caller's arguments.
    let call = || unsafe { real(a[0], a[1], a[2], a[3]) };
    if s.point >= rt.cfg.n_points {
        return call();
    }
    let gate = rt.cfg.gate(s.point);
    let Some(mut col) = threads::own_column(&rt, s.point) else {
        return call();
    };
    // A static program's wrapped functions are ordinary functions of its libc, which call
    // one another: record the outermost call only, as a PLT wrapper sees it.
    let nested_guard = s.indirect == 0;
    if nested_guard {
        if col.h.in_wrap != 0 {
            return call();
        }
        col.h.in_wrap = 1;
    }
    control::safe_point(&rt, &mut col);
    let gate = gate & col.h.thread_mask as u8;
    if gate & bit(METRIC_CALLS) != 0 {
        if let Some(c) = col.counter_mut(SLOT_CALLS, s.point) {
            *c = c.wrapping_add(1);
        }
    }
    let r = recorded(&rt, &mut col, s, a, ra, gate, resolving, real);
    let n = slow_events(s.func, gate);
    if n != 0 {
        // After the call: a thread that exits in it (`pthread_exit`) is not counted.
        let tid = col.h.tid;
        let mut ev = Ev { rt: &rt, col: &mut col, gate, ra, tid, resolving };
        if ev.begin() {
            ev.col.count_slow_event(n);
            ev.end();
        }
    }
    if nested_guard {
        col.h.in_wrap = 0;
    }
    r
}

/// How many slow-path wrapper events (slowwrap, D21; each costs the calibrated
/// `wrap_slow_ticks`, [`calibrate_slow`]) a call of `func` through [`wrap`] counts at the
/// innermost frame's node with the metric bits `gate`: a condition wait two (its mutex
/// given back, then the timed wait and the mutex taken again), every other call that records
/// a lock metric or the state trace one, `pthread_create` one (its start slot) whatever the
/// metrics; a call that records nothing, none.
fn slow_events(func: u32, gate: u8) -> u64 {
    let recording = gate & (WAIT | HOLD | TRACE) != 0;
    match func {
        WRAP_PTHREAD_CREATE => 1,
        WRAP_COND_WAIT | WRAP_COND_TIMEDWAIT | WRAP_COND_CLOCKWAIT if recording => 2,
        WRAP_PTHREAD_JOIN
        | WRAP_TIMEDJOIN_NP
        | WRAP_MUTEX_LOCK
        | WRAP_MUTEX_TIMEDLOCK
        | WRAP_MUTEX_TRYLOCK
        | WRAP_MUTEX_UNLOCK
        | WRAP_RWLOCK_RDLOCK
        | WRAP_RWLOCK_WRLOCK
        | WRAP_RWLOCK_TIMEDRDLOCK
        | WRAP_RWLOCK_TIMEDWRLOCK
        | WRAP_RWLOCK_TRYRDLOCK
        | WRAP_RWLOCK_TRYWRLOCK
        | WRAP_RWLOCK_UNLOCK
        | WRAP_SEM_WAIT
        | WRAP_SEM_TIMEDWAIT
        | WRAP_SEM_TRYWAIT
        | WRAP_BARRIER_WAIT
        | WRAP_COND_SIGNAL
        | WRAP_COND_BROADCAST
        | WRAP_SEM_POST
            if recording =>
        {
            1
        }
        _ => 0,
    }
}

/// How many wait-table slots the mutex fast path looks at before it takes the full path
/// (all of them steps `lock_cache` can hold).
const FAST_PROBES: u32 = crate::column::LOCK_CACHE_PROBES;

/// See `stint_rt_wrap_lock`: `pthread_mutex_lock`, `_timedlock` and `_unlock` of a dynamic
/// program whose thunk found the thread registered (GS is its column, not poked by `stint
/// ctl`) and the thread measuring nothing at the point but `calls`, `lock_wait` and
/// `lock_hold`. A mutex's common case costs one `rdtsc` per call and no shared-table lookup:
/// - a lock that finds the lock word 0 (the mutex free: no wait to time, as in the full
///   path) and the mutex's wait entry among the first slots of its address's probe
///   sequence in the thread's wait table (the table is the per-thread cache from mutex
///   address to object: [`Column::wait_entry`] homes every entry at its object's address;
///   the entry found last is remembered in the column header, [`Column::cached_wait`], so a
///   lock and its unlock look neither at the probe sequence nor at the shared table);
/// - an unlock whose mutex's entry is found the same way;
/// - `pthread_cond_signal`, `_broadcast` and `sem_post`, which neither wait nor hold: the
///   call is counted and, with `lock_wait`, the object's first use recorded (the shared
///   table's lookup), as the full path does, without its safe point and dispatch.
///
/// Everything else goes to [`wrap`], which records exactly what it always did: a busy lock
/// word (the wait is timed, `contended` counted, whatever the mutex's kind: a recursive
/// mutex's owner relocking, an error-checking one's `EDEADLK`, a robust one's owner died),
/// an object this thread has no entry for yet, a lazy-binding slot not resolved yet, a
/// signal handler that interrupted the runtime on this thread (`busy`), a runtime that is
/// not measuring. What is recorded on the fast path is what the full path records for the
/// same call: `calls`, the entry's `count` (and its caller while no wait was timed), the
/// held stack and `last_tsc` at a lock that returned 0; the hold time at an unlock.
///
/// # Safety
/// As [`wrap`].
pub unsafe fn wrap_lock(a: [usize; 4], ra: usize, site: *const WrapSite) -> usize {
    // Safety: the descriptor is in our read-only segment.
    let s = unsafe { &*site };
    let base = site as *const u8;
    // Safety: per the contract.
    let rt = unsafe { Rt::enter(base.wrapping_offset(s.config_rel as isize) as *const RtConfig) };
    // Safety: forwarded contract.
    let full = || unsafe { wrap(a, ra, site) };
    let lazy = base.wrapping_offset(s.lazy_rel as isize) as usize;
    if s.indirect == 0 || s.point >= rt.cfg.n_points {
        return full();
    }
    // Safety: a GOT slot of the program (resolved, or the lazy-binding entry).
    let real_addr = unsafe { core::ptr::read_volatile(base.wrapping_offset(s.real_rel as isize) as *const usize) };
    if s.lazy_rel != 0 && real_addr == lazy {
        return full();
    }
    let Some(mut col) = threads::thunk_checked_column(&rt) else {
        return full();
    };
    let gate = rt.cfg.gate(s.point) & col.h.thread_mask as u8;
    if gate & !(bit(METRIC_CALLS) | WAIT | HOLD) != 0 || col.h.busy != 0 {
        return full();
    }
    // Safety: the address of the real function.
    let real: Real = unsafe { core::mem::transmute::<usize, Real>(real_addr) };
    let count = |col: &mut Column| {
        if gate & bit(METRIC_CALLS) != 0 {
            if let Some(c) = col.counter_mut(SLOT_CALLS, s.point) {
                *c = c.wrapping_add(1);
            }
        }
    };
    let addr = a[0];
    if matches!(s.func, WRAP_COND_SIGNAL | WRAP_COND_BROADCAST | WRAP_SEM_POST) {
        // Nothing waits or is held: what the full path records is the call and, with
        // `lock_wait`, the object's first use (a lookup in the shared table after that).
        count(&mut col);
        if gate & WAIT != 0 {
            let kind = if s.func == WRAP_SEM_POST { OBJ_SEMAPHORE } else { OBJ_CONDVAR };
            // The object this thread signalled last, already in the table: nothing to
            // record (a producer signals one condition variable again and again).
            let key = signal_key(addr, kind);
            if key == 0 || col.h.signal_cache != key {
                let tid = col.h.tid;
                let mut ev = Ev { rt: &rt, col: &mut col, gate, ra, tid, resolving: false };
                if ev.begin() {
                    if object(&mut ev, kind, addr).is_some() {
                        ev.col.h.signal_cache = key;
                    }
                    ev.end();
                }
            }
        }
        // Safety: calling the real function with the caller's arguments.
        return unsafe { real(a[0], a[1], a[2], a[3]) };
    }
    let lock = s.func != WRAP_MUTEX_UNLOCK;
    if !lock && (gate & HOLD == 0 || col.h.n_held == 0) {
        // No hold to close: the full path would only count and call, too.
        count(&mut col);
        // Safety: calling the real function with the caller's arguments.
        return unsafe { real(a[0], a[1], a[2], a[3]) };
    }
    if addr == 0 {
        return full();
    }
    // Safety: `addr` is the program's pthread_mutex_t (the real call reads it too).
    if lock && unsafe { core::ptr::read_volatile(lock_word(&rt, addr)) } != 0 {
        return full();
    }
    // The mutex this thread used last (a lock and its unlock): no probing, no shared table.
    let (obj, e): (u32, *mut WaitEntry) = match col.cached_wait(addr as u64, OBJ_MUTEX) {
        Some((obj, e)) => (obj, e),
        None => {
            let Some(objects) = Objects::of(&rt) else {
                return full();
            };
            let found = col.find_wait(addr as u64, OBJ_MUTEX, FAST_PROBES, |i| objects.address(i) == Some(addr as u64));
            let Some((obj, e)) = found else {
                return full();
            };
            (obj, e)
        }
    };
    count(&mut col);
    // Safety: `e` is `col`'s wait entry of `obj`; the real function with the caller's
    // arguments.
    unsafe { lock_fast(&rt, &mut col, gate, lock, obj, e, ra, a, real) }
}

/// `ColumnHeader::signal_cache`'s word for a condition variable or semaphore at `addr`; 0
/// (never cached) for an address that is not a multiple of 4.
fn signal_key(addr: usize, kind: u32) -> u64 {
    if addr & 3 != 0 {
        return 0;
    }
    addr as u64 | if kind == OBJ_SEMAPHORE { 2 } else { 1 }
}

/// What [`wrap_lock`] records for an uncontended mutex lock (after calling it) or unlock
/// (before), once it found the mutex's wait entry `e` (object `obj`), and the real call. The
/// event is counted at the innermost frame's call-path node (wrapcomp, D21), so a reader
/// can take its calibrated cost ([`calibrate_lock`]) out of the timed functions around it.
///
/// # Safety
/// `e` points at `col`'s wait entry of `obj`; `real` is the function to run with `a`.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
unsafe fn lock_fast<'a>(
    rt: &Rt<'a>,
    col: &mut Column<'a>,
    gate: u8,
    lock: bool,
    obj: u32,
    e: *mut WaitEntry,
    ra: usize,
    a: [usize; 4],
    real: Real,
) -> usize {
    let tid = col.h.tid;
    let mut ev = Ev { rt, col, gate, ra, tid, resolving: false };
    if lock {
        // Safety: calling the real function with the caller's arguments.
        let r = unsafe { real(a[0], a[1], a[2], a[3]) };
        if r as i32 != 0 || !ev.begin() {
            return r;
        }
        if gate & WAIT != 0 {
            // Safety: the entry lies in this thread's own wait table, where entries are
            // claimed but never moved: a handler that ran meanwhile left it where it was.
            let e = unsafe { &mut *e };
            e.count += 1;
            if e.longest_pc == 0 {
                e.longest_pc = (ra as u64).wrapping_sub(rt.cfg.bias());
            }
        }
        if gate & HOLD != 0 {
            let now = sys::rdtsc();
            ev.col.push_held(obj, now);
            ev.col.h.last_tsc = now;
        }
        ev.col.count_wrap_event();
        ev.end();
        r
    } else {
        if ev.begin() {
            let now = sys::rdtsc();
            if let Some(since) = ev.col.pop_held(obj) {
                // Safety: as above.
                let e = unsafe { &mut *e };
                e.hold_ticks = e.hold_ticks.wrapping_add(now.wrapping_sub(since));
            }
            ev.col.count_wrap_event();
            ev.end();
        }
        // Safety: calling the real function with the caller's arguments.
        unsafe { real(a[0], a[1], a[2], a[3]) }
    }
}

/// Batches of [`calibrate_lock`] (the first one more warms up and is not kept).
const CALIB_LOCK_BATCHES: usize = 7;
/// Lock + unlock pairs per batch.
const CALIB_LOCK_PAIRS: u32 = 1000;

/// The stand-ins for the real `pthread_mutex_lock` and `_unlock` of [`calibrate_lock`]: an
/// uncontended glibc mutex's fast paths (a locked compare-exchange of the lock word 0 → 1,
/// an exchange back to 0), returning 0. The bare loop calls them as often, so their own
/// cost cancels.
#[inline(never)]
extern "C" fn calib_lock(m: usize, _: usize, _: usize, _: usize) -> usize {
    // Safety: `calibrate_lock`'s mutex word, aligned.
    let w = unsafe { AtomicU32::from_ptr(m as *mut u32) };
    let _ = w.compare_exchange(0, 1, Ordering::Acquire, Ordering::Relaxed);
    0
}

#[inline(never)]
extern "C" fn calib_unlock(m: usize, _: usize, _: usize, _: usize) -> usize {
    // Safety: as above.
    let w = unsafe { AtomicU32::from_ptr(m as *mut u32) };
    w.swap(0, Ordering::Release);
    0
}

/// The stand-ins the wrapper calibrations run on ([`calibrate_lock`], [`calibrate_slow`]):
/// a profile file in private memory (its header page, a zero control page, so that a safe
/// point finds no request, then a one-object table holding the calibration's mutex) and a
/// private column (GS; every region counted as allocated, one open frame at node 0), with
/// point 0's gate set to `calls`, `lock_wait` and `lock_hold`, `base` and `active` pointing
/// at the file and the runtime's descriptor -1: nothing of a real profile exists yet, and
/// nothing here can reach a file. [`StandIn::close`] puts everything back.
struct StandIn {
    file: usize,
    file_len: usize,
    colm: usize,
    col_len: usize,
    gate: *mut u8,
    saved_gate: u8,
    saved_fd: i32,
}

impl StandIn {
    /// `None` when the memory cannot be had, the runtime is already measuring, or the
    /// program has no points.
    ///
    /// # Safety
    /// As [`calibrate_lock`]; `mutex` is the calibration's mutex word, live until
    /// [`StandIn::close`].
    unsafe fn open(rt: &Rt, gate: *mut u8, mutex: usize) -> Option<StandIn> {
        let geo = rt.cfg.geometry();
        if rt.st.active() || rt.st.base() != 0 || geo.n_points == 0 {
            return None;
        }
        let col_len = column_size(geo.n_points, geo.n_slots) as usize;
        let objects_at = HEADER_RESERVED + PAGE; // after the control page
        let file_len = (objects_at + PAGE) as usize;
        let prot = sys::PROT_READ | sys::PROT_WRITE;
        let map = |len: usize| {
            // Safety: not MAP_FIXED: new memory only.
            unsafe { sys::mmap(0, len, prot, sys::MAP_PRIVATE | sys::MAP_ANONYMOUS, -1, 0) }.ok()
        };
        let file = map(file_len)?;
        let Some(colm) = map(col_len) else {
            // Safety: the mapping just made, referenced by nothing.
            let _ = unsafe { sys::munmap(file, file_len) };
            return None;
        };
        let hdr = FileHeader {
            objects_offset: objects_at,
            obj_buckets: 1,
            obj_cap: 1,
            n_objects: 1,
            ..FileHeader::default()
        };
        let obj = SyncObject { address: mutex as u64, kind: OBJ_MUTEX, ..SyncObject::default() };
        let at = file + objects_at as usize;
        // Safety: inside the fresh mapping (a header fits its page; a bucket and an object the
        // last page; the control page stays zero).
        unsafe {
            core::ptr::write(file as *mut FileHeader, hdr);
            core::ptr::write(at as *mut ObjBucket, ObjBucket { lock: 0, head: 1 });
            core::ptr::write((at + size_of::<ObjBucket>()) as *mut SyncObject, obj);
        }
        let tp = sys::thread_pointer();
        // Safety: `tid_offset` is 0 or inside glibc's thread control block (rewriter contract).
        let key = if rt.cfg.tid_offset != 0 { unsafe { sys::fs_u32(rt.cfg.tid_offset) } } else { tp as u32 };
        {
            // Safety: a fresh private mapping of a whole column, ours alone in this block.
            let col = unsafe { Column::from_raw(colm as *mut ColumnHeader, geo) };
            *col.h = ColumnHeader {
                self_addr: colm as u64,
                owner_tp: tp,
                owner_key: key,
                exit_key: key,
                thread_mask: u32::MAX,
                depth: 1,
                cct_nodes: 1,
                cct_ready: 1,
                shadow_ready: SHADOW_CAP,
                // Every region counts as allocated: nothing here may reach the file.
                lazy_ready: LAZY_LOCK_TABLES | LAZY_RING | LAZY_BASELINE,
                cct_wraps_ready: CCT_CAP,
                cct_slow_ready: CCT_CAP,
                state_object: u32::MAX,
                ..ColumnHeader::default()
            };
            let mut col = col;
            col.set_frame(0, Frame { sp: u64::MAX, node: 1, ..Frame::default() });
            let _ = col.wait_entry(0, OBJ_MUTEX, mutex as u64);
        }
        // Safety: start-up (the contract): the gate byte is writable, GS is ours to move.
        let saved_gate = unsafe { core::ptr::read_volatile(gate) };
        let saved_fd = rt.st.fd();
        // Safety: as above.
        unsafe {
            core::ptr::write_volatile(gate, bit(METRIC_CALLS) | WAIT | HOLD);
            let _ = sys::set_gs_base(colm);
        }
        rt.st.set_fd(-1);
        rt.st.set_base(file);
        rt.st.set_active(true);
        Some(StandIn { file, file_len, colm, col_len, gate, saved_gate, saved_fd })
    }

    /// The runtime as before [`StandIn::open`]: measuring nothing, on the dummy column, its
    /// descriptor and point 0's gate put back; the stand-ins unmapped.
    ///
    /// # Safety
    /// As [`StandIn::open`]; nothing refers to the stand-ins any more.
    unsafe fn close(self, rt: &Rt) {
        rt.st.set_active(false);
        rt.st.set_base(0);
        rt.st.set_fd(self.saved_fd);
        // Safety: the caller's contract.
        unsafe {
            core::ptr::write_volatile(self.gate, self.saved_gate);
            let _ = sys::set_gs_base(rt.st.dummy_addr() as usize);
            let _ = sys::munmap(self.colm, self.col_len);
            let _ = sys::munmap(self.file, self.file_len);
        }
    }
}

/// The ticks × `CALIB_SCALE` one fast-path wrapper event costs the program (wrapcomp,
/// D21): half of an uncontended lock + unlock through [`wrap_lock`] itself (its checks,
/// [`lock_fast`] and the event's count at a node) with `calls`, `lock_wait` and `lock_hold`
/// on, minus the same real calls made bare (stand-ins), each side's least of
/// [`CALIB_LOCK_BATCHES`] ([`lock_event_figure`]), on a [`StandIn`] of the profile file and the
/// column. Not in the figure: the rewriter's thunk in front (a gate test, the thread check, a
/// jump; ≈ 1 ns). 0 when the memory cannot be had or the runtime is already measuring.
///
/// # Safety
/// Start-up, single-threaded, before `profile_file::create`; GS points at the dummy column
/// and is put back there; `gate` is point 0's gate byte, writable, restored by the caller.
pub unsafe fn calibrate_lock(rt: &Rt, gate: *mut u8) -> u64 {
    let mut mutex = [0u64; 5];
    let addr = mutex.as_mut_ptr() as usize;
    // Safety: the contract (start-up, GS and the gate ours); the mutex lives to the close.
    let Some(si) = (unsafe { StandIn::open(rt, gate, addr) }) else {
        return 0;
    };
    let geo = rt.cfg.geometry();
    // Two descriptors as the rewriter emits them, whose GOT slots hold the stand-ins.
    let slots: [usize; 2] = [calib_lock as *const () as usize, calib_unlock as *const () as usize];
    let site = |func: u32| WrapSite { indirect: 1, func, point: 0, ..WrapSite::default() };
    let mut sites = [site(WRAP_MUTEX_LOCK), site(WRAP_MUTEX_UNLOCK)];
    // Relative to where the descriptors are.
    for (s, slot) in sites.iter_mut().zip(slots.iter()) {
        let at = s as *const WrapSite as i64;
        s.config_rel = rt.cfg.addr() as i64 - at;
        s.real_rel = slot as *const usize as i64 - at;
    }
    let a = [addr, 0, 0, 0];
    let mut batches = [(0u64, 0u64); CALIB_LOCK_BATCHES];
    for k in 0..=CALIB_LOCK_BATCHES {
        let t0 = sys::rdtsc();
        for _ in 0..CALIB_LOCK_PAIRS {
            for s in &sites {
                // Safety: a descriptor as the rewriter's (above); the stand-in as the real call.
                unsafe { wrap_lock(a, 0, s) };
            }
        }
        let t1 = sys::rdtsc();
        for _ in 0..CALIB_LOCK_PAIRS {
            for slot in &slots {
                // Safety: the stand-ins, loaded from their slots as the wrapper does.
                let real = unsafe { core::mem::transmute::<usize, Real>(core::ptr::read_volatile(slot)) };
                // Safety: the stand-ins on the mutex above.
                unsafe { real(a[0], a[1], a[2], a[3]) };
            }
        }
        let t2 = sys::rdtsc();
        if let Some(b) = k.checked_sub(1).and_then(|k| batches.get_mut(k)) {
            *b = (t1.wrapping_sub(t0), t2.wrapping_sub(t1));
        }
    }
    // Every event took the fast path, or the figure is not the fast path's: the node's count.
    // Safety: the stand-in column, still mapped.
    let counted = unsafe {
        core::ptr::read_volatile((si.colm + cct_wraps_offset(geo.n_points, geo.n_slots) as usize) as *const u64)
    };
    // Safety: as above; nothing refers to the stand-ins any more.
    unsafe { si.close(rt) };
    if counted != 2 * CALIB_LOCK_PAIRS as u64 * (CALIB_LOCK_BATCHES as u64 + 1) {
        return 0;
    }
    lock_event_figure(&batches)
}

/// One fast-path event's ticks × `CALIB_SCALE` from [`calibrate_lock`]'s batches (the ticks
/// of `CALIB_LOCK_PAIRS` pairs wrapped, and the same calls bare): the least wrapped batch
/// minus the least bare one, halved. What disturbs a batch (a preemption, an interrupt,
/// another process's cache misses) only adds to it, so each least is its side's undisturbed
/// figure. Not the least of the per-batch differences: a bare batch disturbed by more than
/// the wrapper's whole cost (an interrupt of 40 µs against 1,000 pairs' 30 µs) made its
/// difference 0, and that least 0 left the process without a figure (about 1 process in 50
/// under load; every event had taken the fast path).
fn lock_event_figure(batches: &[(u64, u64)]) -> u64 {
    event_figure(batches, CALIB_LOCK_PAIRS)
}

/// One event's ticks × `CALIB_SCALE` from batches of `pairs` lock + unlock pairs (ticks
/// wrapped, ticks bare): the least wrapped batch minus the least bare one, per event
/// ([`lock_event_figure`] says why not the least of the differences).
fn event_figure(batches: &[(u64, u64)], pairs: u32) -> u64 {
    let wrapped = batches.iter().map(|b| b.0).min().unwrap_or(0);
    let bare = batches.iter().map(|b| b.1).min().unwrap_or(0);
    wrapped.saturating_sub(bare).saturating_mul(CALIB_SCALE) / pairs as u64 / 2
}

/// Batches of [`calibrate_slow`] (the first one more warms up and is not kept), and lock +
/// unlock pairs per batch: more and shorter batches than [`calibrate_lock`]'s, so that the
/// least of them more likely misses every disturbance (about 0.35 ms in all here).
const CALIB_SLOW_BATCHES: usize = 16;
const CALIB_SLOW_PAIRS: u32 = 250;

/// The stand-ins of [`calibrate_slow`]'s real calls: one atomic exchange of the mutex word
/// that leaves it non-zero (2, a glibc mutex with waiters), so every lock finds it taken
/// and takes the timed path; returning 0 (acquired, released).
#[inline(never)]
extern "C" fn calib_busy(m: usize, _: usize, _: usize, _: usize) -> usize {
    // Safety: `calibrate_slow`'s mutex word, aligned.
    let w = unsafe { AtomicU32::from_ptr(m as *mut u32) };
    w.swap(2, Ordering::AcqRel);
    0
}

/// The ticks × `CALIB_SCALE` one wrapper event off the fast path costs the program
/// (slowwrap, D21): half of a mutex lock that finds the lock word taken (through
/// [`wrap_lock`]'s checks, as a contended lock comes, to the full path of [`wrap`]: its safe
/// point and dispatch, [`blocking`]'s object lookup, two TSC reads, the state transitions,
/// the wait entry and the held stack) + an unlock through the full path ([`release`]), each counted at a node ([`Column::count_slow_event`]), with `calls`,
/// `lock_wait` and `lock_hold` on, minus the same real calls made bare (stand-ins that never
/// block), each side's least of [`CALIB_SLOW_BATCHES`] ([`event_figure`]), on a [`StandIn`]
/// (its zero control page: the full path's safe point finds no request). Not in the figure: the thunk in front and
/// `stint_rt_wrap`'s register save (a few ns), and the kernel's part of a real wait. 0 when
/// the memory cannot be had, the runtime is already measuring, or an event was not counted.
///
/// # Safety
/// As [`calibrate_lock`].
pub unsafe fn calibrate_slow(rt: &Rt, gate: *mut u8) -> u64 {
    // Taken from the start (2, as the stand-ins leave it): every lock takes the timed path.
    let mut mutex = [2u64, 0, 0, 0, 0];
    let addr = mutex.as_mut_ptr() as usize;
    // Safety: as `calibrate_lock`.
    let Some(si) = (unsafe { StandIn::open(rt, gate, addr) }) else {
        return 0;
    };
    let geo = rt.cfg.geometry();
    let slot: usize = calib_busy as *const () as usize;
    let site = |func: u32| WrapSite { indirect: 1, func, point: 0, ..WrapSite::default() };
    let mut sites = [site(WRAP_MUTEX_LOCK), site(WRAP_MUTEX_UNLOCK)];
    for s in sites.iter_mut() {
        let at = s as *const WrapSite as i64;
        s.config_rel = rt.cfg.addr() as i64 - at;
        s.real_rel = &slot as *const usize as i64 - at;
    }
    let a = [addr, 0, 0, 0];
    let mut batches = [(0u64, 0u64); CALIB_SLOW_BATCHES];
    for k in 0..=CALIB_SLOW_BATCHES {
        let t0 = sys::rdtsc();
        for _ in 0..CALIB_SLOW_PAIRS {
            // The lock through the lock entry, as the thunk sends a mutex lock: its checks
            // find the word taken and hand the call to `wrap`; the unlock through `wrap`.
            // Safety: descriptors as the rewriter's (above); the stand-in as the real call.
            unsafe {
                wrap_lock(a, 0, &sites[0]);
                wrap(a, 0, &sites[1]);
            }
        }
        let t1 = sys::rdtsc();
        for _ in 0..CALIB_SLOW_PAIRS {
            for _ in &sites {
                // Safety: the stand-in, loaded from its slot as the wrapper does.
                let real = unsafe { core::mem::transmute::<usize, Real>(core::ptr::read_volatile(&slot)) };
                // Safety: the stand-in on the mutex above.
                unsafe { real(a[0], a[1], a[2], a[3]) };
            }
        }
        let t2 = sys::rdtsc();
        if let Some(b) = k.checked_sub(1).and_then(|k| batches.get_mut(k)) {
            *b = (t1.wrapping_sub(t0), t2.wrapping_sub(t1));
        }
    }
    // Every lock took the timed path and every event was counted at the node.
    // Safety: the stand-in column, still mapped.
    let (counted, contended) = unsafe {
        let e = (si.colm + WAITS_OFFSET as usize) as *const WaitEntry;
        let contended =
            (0..WAIT_CAP as usize).map(|i| core::ptr::read_volatile(&raw const (*e.add(i)).contended)).sum::<u64>();
        (
            core::ptr::read_volatile((si.colm + cct_slow_offset(geo.n_points, geo.n_slots) as usize) as *const u64),
            contended,
        )
    };
    // Safety: as above; nothing refers to the stand-ins any more.
    unsafe { si.close(rt) };
    let events = CALIB_SLOW_PAIRS as u64 * (CALIB_SLOW_BATCHES as u64 + 1);
    if counted != 2 * events || contended != events {
        return 0;
    }
    event_figure(&batches, CALIB_SLOW_PAIRS)
}

/// The wrapped call `s` on this thread's column, recorded.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn recorded<'a>(
    rt: &Rt<'a>,
    col: &mut Column<'a>,
    s: &WrapSite,
    a: [usize; 4],
    ra: usize,
    gate: u8,
    resolving: bool,
    real: Real,
) -> usize {
    // Safety: calling the real function with the caller's arguments.
    let call = || unsafe { real(a[0], a[1], a[2], a[3]) };
    let tid = col.h.tid;
    let mut ev = Ev { rt, col, gate, ra, tid, resolving };
    let ev = &mut ev;
    let ok0 = |r: usize| r as i32 == 0;
    match s.func {
        WRAP_PTHREAD_CREATE => create(ev, a, real),
        WRAP_PTHREAD_EXIT => {
            thread_end(ev, EXIT_PTHREAD_EXIT, a[0] as u64);
            call()
        }
        WRAP_PTHREAD_JOIN | WRAP_TIMEDJOIN_NP => join(ev, a[0], a[1], call),
        WRAP_MUTEX_LOCK | WRAP_MUTEX_TIMEDLOCK => {
            blocking(ev, OBJ_MUTEX, STATE_BLOCKED_MUTEX, a[0], Busy::LockWord, true, ok0, call)
        }
        WRAP_MUTEX_TRYLOCK => attempt(ev, OBJ_MUTEX, a[0], true, ok0, call),
        WRAP_MUTEX_UNLOCK => release(ev, OBJ_MUTEX, a[0], call),
        WRAP_COND_WAIT | WRAP_COND_TIMEDWAIT | WRAP_COND_CLOCKWAIT => cond_wait(ev, a[0], a[1], call),
        WRAP_RWLOCK_RDLOCK | WRAP_RWLOCK_WRLOCK | WRAP_RWLOCK_TIMEDRDLOCK | WRAP_RWLOCK_TIMEDWRLOCK => {
            blocking(ev, OBJ_RWLOCK, STATE_BLOCKED_RWLOCK, a[0], Busy::Slow, true, ok0, call)
        }
        WRAP_RWLOCK_TRYRDLOCK | WRAP_RWLOCK_TRYWRLOCK => attempt(ev, OBJ_RWLOCK, a[0], true, ok0, call),
        WRAP_RWLOCK_UNLOCK => release(ev, OBJ_RWLOCK, a[0], call),
        WRAP_SEM_WAIT | WRAP_SEM_TIMEDWAIT => {
            blocking(ev, OBJ_SEMAPHORE, STATE_BLOCKED_SEMAPHORE, a[0], Busy::Slow, false, ok0, call)
        }
        WRAP_SEM_TRYWAIT => attempt(ev, OBJ_SEMAPHORE, a[0], false, ok0, call),
        WRAP_BARRIER_WAIT => blocking(
            ev,
            OBJ_BARRIER,
            STATE_BLOCKED_BARRIER,
            a[0],
            Busy::Slow,
            false,
            |r| r as i32 == 0 || r as i32 == BARRIER_SERIAL,
            call,
        ),
        WRAP_SETNAME_NP => {
            let r = call();
            if r as i32 == 0 {
                set_name(ev, a[0] as u64, a[1] as *const u8);
            }
            r
        }
        // signal, broadcast, post: nothing waits, but the object is used (first used in).
        WRAP_COND_SIGNAL | WRAP_COND_BROADCAST | WRAP_SEM_POST => {
            if gate & WAIT != 0 && ev.begin() {
                let kind = if s.func == WRAP_SEM_POST { OBJ_SEMAPHORE } else { OBJ_CONDVAR };
                object(ev, kind, a[0]);
                ev.end();
            }
            call()
        }
        _ => call(),
    }
}

/// The lock word of the mutex at `addr`: glibc's `__lock` is the first int of
/// `pthread_mutex_t`; musl's `_m_lock` is the second (after `_m_type`), told by the musl
/// tid offset the rewriter chose for the program.
fn lock_word(rt: &Rt, addr: usize) -> *const u32 {
    let off = if rt.cfg.tid_offset == MUSL_TID_OFFSET { 4 } else { 0 };
    addr.wrapping_add(off) as *const u32
}

/// The process functions (D22): `exit`, `_exit`, `_Exit` record this image's end with its
/// status before the real call; `wait`, `waitpid`, `wait4` and `waitid` record how the child
/// they reaped ended, in the child's profile, after it. Nothing is recorded unless this
/// process measures into a profile of its own: a `vfork` child (which shares its parent's
/// memory) or a fork child before its first event must never write into the parent's. A
/// status or siginfo pointer the caller left null is replaced by one of ours (the kernel
/// then reports into it; the caller sees what it would have).
fn process_fn(rt: &Rt, f: ProcessFn, a: [usize; 4], real: Real) -> usize {
    let st = rt.st;
    let ours = st.active() && st.pid() == sys::getpid();
    let mut args = a;
    match f {
        ProcessFn::Exit | ProcessFn::UnderscoreExit | ProcessFn::CapitalExit => {
            if let Some(hdr) = rt.file_header().filter(|_| ours) {
                // Safety: this process's own mapped header.
                unsafe { crate::process::record_end(hdr, ProcessEnd::Exit, a[0] as u32 & 0xff) };
            }
            if ours {
                crate::calib::calibrate_again(rt);
            }
        }
        ProcessFn::Wait | ProcessFn::Waitpid | ProcessFn::Wait4 => {
            let at = if f == ProcessFn::Wait { 0 } else { 1 };
            let mut local: i32 = 0;
            if let Some(p) = args.get_mut(at).filter(|p| **p == 0) {
                *p = (&raw mut local) as usize;
            }
            // Safety: the real function with the caller's arguments (a valid status pointer).
            let r = unsafe { real(args[0], args[1], args[2], args[3]) };
            let pid = r as i32;
            if ours && pid > 0 {
                // Safety: the status word the kernel just filled (the caller's or `local`).
                let status = unsafe { core::ptr::read_volatile(args[at] as *const i32) };
                if let Some((how, v)) = crate::process::wait_status(status) {
                    child_ended(rt, pid as u32, how, v);
                }
            }
            return r;
        }
        // Never through here: their thunks call `main_hook`.
        ProcessFn::StartMain | ProcessFn::Syscall => {}
        ProcessFn::Waitid => {
            let mut local = [0u8; 128];
            if args[2] == 0 {
                args[2] = local.as_mut_ptr() as usize;
            }
            // Safety: as above (a valid siginfo pointer).
            let r = unsafe { real(args[0], args[1], args[2], args[3]) };
            if ours && r as i32 == 0 {
                // Safety: the siginfo_t (128 bytes) the kernel just filled.
                let info = unsafe { core::ptr::read_volatile(args[2] as *const [u8; 128]) };
                if let Some((pid, how, v)) = crate::process::waitid_status(&info) {
                    child_ended(rt, pid, how, v);
                }
            }
            return r;
        }
    }
    // Safety: the real function with the caller's arguments.
    unsafe { real(args[0], args[1], args[2], args[3]) }
}

/// `__libc_start_main`'s thunk and the main thunk (D22; codegen's `start_main_thunk`):
/// - op 0, `value` = the program's `main`: keep it, return the real `__libc_start_main`
///   (which the thunk then runs with every argument as `_start` passed it, `main` replaced
///   by the main thunk);
/// - op 1: return the program's `main` (the main thunk calls it);
/// - op 2, `value` = what `main` returned: record `exit value & 0xff` (what the parent's
///   `wait` sees: libc calls `exit` with it) as this image's end, return `value`; the thunk
///   of `syscall` uses it too, for `syscall(SYS_exit_group, value)`.
///
/// `main`'s return is recorded only in a profile of this process (as `exit`'s): a fork child
/// that returns from `main` has its own, or none. `exit` handlers that call `_exit` with
/// another status record later, and win.
///
/// # Safety
/// `site` is the rewriter-emitted descriptor of `__libc_start_main`.
pub unsafe fn main_hook(site: *const WrapSite, op: usize, value: usize) -> usize {
    // Safety: the descriptor is in our read-only segment.
    let s = unsafe { &*site };
    let base = site as *const u8;
    // Safety: per the contract.
    let rt = unsafe { Rt::enter(base.wrapping_offset(s.config_rel as isize) as *const RtConfig) };
    match op {
        0 => {
            rt.st.main_fn.store(value, Ordering::Release);
            let real_at = base.wrapping_offset(s.real_rel as isize);
            if s.indirect != 0 {
                // Safety: a GOT slot of the program.
                unsafe { core::ptr::read_volatile(real_at as *const usize) }
            } else {
                real_at as usize
            }
        }
        1 => rt.st.main_fn.load(Ordering::Acquire),
        _ => {
            let ours = rt.st.active() && rt.st.pid() == sys::getpid();
            if let Some(hdr) = rt.file_header().filter(|_| ours) {
                // Safety: this process's own mapped header.
                unsafe { crate::process::record_end(hdr, ProcessEnd::Exit, value as u32 & 0xff) };
            }
            // A main thread that returns from `main` never reaches `thread_end`: its time on
            // a CPU and on a run queue (the RUN split, issue 12) is read here.
            if let Some(col) = threads::registered_column(&rt).filter(|_| ours) {
                threads::record_schedstat(col.h);
            }
            if ours {
                crate::calib::calibrate_again(&rt);
            }
            value
        }
    }
}

/// Record a reaped child's end in its profile, next to this process's own.
fn child_ended(rt: &Rt, child: u32, how: ProcessEnd, v: u32) {
    // Safety: read only. After start-up, the profile path of a process that measures is
    // written again only by a fork child's hand-off, in the child's own memory.
    let su = unsafe { rt.st.startup() };
    let Some(own) = su.path.get(..su.path_len as usize).filter(|p| !p.is_empty()) else { return };
    crate::process::record_child_end(own, sys::getpid(), child, how, v);
}

/// How a call tells it found the object busy.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Busy {
    /// The mutex's lock word ([`lock_word`]) was non-zero.
    LockWord,
    /// The call blocked longer than `CONTENDED_NS`.
    Slow,
}

/// A call that may block on `addr` (`kind`): the thread is in `state` while inside.
#[allow(clippy::too_many_arguments)]
fn blocking(
    ev: &mut Ev,
    kind: u32,
    state: u32,
    addr: usize,
    busy: Busy,
    holds: bool,
    ok: impl Fn(usize) -> bool,
    call: impl FnOnce() -> usize,
) -> usize {
    if ev.gate & (WAIT | HOLD | TRACE) == 0 || !ev.begin() {
        return call();
    }
    let obj = object(ev, kind, addr);
    let found_locked =
        // Safety: `addr` is the program's pthread_mutex_t (the call reads it too).
        busy == Busy::LockWord && addr != 0 && unsafe { core::ptr::read_volatile(lock_word(ev.rt, addr)) } != 0;
    if busy == Busy::LockWord && !found_locked && ev.gate & TRACE == 0 {
        // A free mutex: the lock takes it at once, so no clock reads for a wait of ~0 (the
        // TSC costs ~20 ns in a VM). A thread that takes the mutex between our look and
        // the lock's makes us wait unmeasured: a window of a few instructions.
        ev.end();
        let r = call();
        if !ev.begin() {
            return r;
        }
        let acquired = ok(r);
        if ev.gate & WAIT != 0 {
            let caller = (ev.ra as u64).wrapping_sub(ev.rt.cfg.bias());
            if let Some(e) = ev.wait_entry(obj, kind) {
                e.count += acquired as u64;
                // No wait measured: the caller stands until a call that waits replaces it.
                if e.longest_pc == 0 {
                    e.longest_pc = caller;
                }
            }
        }
        if holds && acquired && ev.gate & HOLD != 0 {
            let now = sys::rdtsc();
            ev.push_held(obj, now);
            ev.col.h.last_tsc = now;
        }
        ev.end();
        return r;
    }
    let (prev, prev_obj) = (ev.col.h.thread_state, ev.col.h.state_object);
    let t0 = sys::rdtsc();
    if ev.tracks_state() {
        transition(ev, state, obj, t0);
    }
    ev.end();
    let r = call();
    let t1 = sys::rdtsc();
    if !ev.begin() {
        return r;
    }
    if ev.tracks_state() {
        transition(ev, prev, (prev_obj != u32::MAX).then_some(prev_obj), t1);
    }
    let acquired = ok(r);
    if ev.gate & WAIT != 0 {
        let slow = t1.wrapping_sub(t0) > contended_ticks(ev);
        let caller = (ev.ra as u64).wrapping_sub(ev.rt.cfg.bias());
        if let Some(e) = ev.wait_entry(obj, kind) {
            e.count += acquired as u64;
            e.contended += (found_locked || (busy == Busy::Slow && slow)) as u64;
            let d = t1.wrapping_sub(t0);
            e.wait_ticks = e.wait_ticks.wrapping_add(d);
            if d > e.longest_ticks {
                e.longest_ticks = d;
                e.longest_pc = caller;
            }
        }
    }
    if holds && acquired && ev.gate & HOLD != 0 {
        ev.push_held(obj, t1);
    }
    ev.col.h.last_tsc = t1;
    ev.end();
    r
}

/// A try-call (trylock, tryrdlock, sem_trywait): never blocks; a failure means the object
/// was busy.
fn attempt(
    ev: &mut Ev,
    kind: u32,
    addr: usize,
    holds: bool,
    ok: impl Fn(usize) -> bool,
    call: impl FnOnce() -> usize,
) -> usize {
    let r = call();
    if ev.gate & (WAIT | HOLD) == 0 || !ev.begin() {
        return r;
    }
    let obj = object(ev, kind, addr);
    let now = sys::rdtsc();
    let acquired = ok(r);
    if ev.gate & WAIT != 0 {
        if let Some(e) = ev.wait_entry(obj, kind) {
            e.count += acquired as u64;
            e.contended += (!acquired && (r as i32 == EBUSY || r as i32 == -1)) as u64;
        }
    }
    if holds && acquired && ev.gate & HOLD != 0 {
        ev.push_held(obj, now);
    }
    ev.col.h.last_tsc = now;
    ev.end();
    r
}

/// An unlock: closes the hold interval, then unlocks.
fn release(ev: &mut Ev, kind: u32, addr: usize, call: impl FnOnce() -> usize) -> usize {
    if ev.gate & HOLD != 0 && ev.col.h.n_held != 0 && ev.begin() {
        let obj = object(ev, kind, addr);
        let now = sys::rdtsc();
        if let Some(since) = ev.pop_held(obj) {
            if let Some(e) = ev.wait_entry(obj, kind) {
                e.hold_ticks = e.hold_ticks.wrapping_add(now.wrapping_sub(since));
            }
        }
        ev.end();
    }
    call()
}

/// pthread_cond_wait / timedwait / clockwait (cond, mutex, …): the mutex is given back for
/// the wait, so its hold interval pauses.
fn cond_wait(ev: &mut Ev, cond: usize, mutex: usize, call: impl FnOnce() -> usize) -> usize {
    let mut held: Option<u32> = None;
    if ev.gate & HOLD != 0 && ev.col.h.n_held != 0 && ev.begin() {
        let m = object(ev, OBJ_MUTEX, mutex);
        let now = sys::rdtsc();
        if let Some(since) = ev.pop_held(m) {
            if let Some(e) = ev.wait_entry(m, OBJ_MUTEX) {
                e.hold_ticks = e.hold_ticks.wrapping_add(now.wrapping_sub(since));
            }
            held = m;
        }
        ev.end();
    }
    let r = blocking(
        ev,
        OBJ_CONDVAR,
        STATE_BLOCKED_CONDVAR,
        cond,
        Busy::Slow,
        false,
        |r| r as i32 == 0 || r as i32 == ETIMEDOUT,
        call,
    );
    if held.is_some() && ev.begin() {
        ev.push_held(held, sys::rdtsc()); // the wait returns with the mutex locked again
        ev.end();
    }
    r
}

/// pthread_join / pthread_timedjoin_np (thread, retval, …): a wait on the thread; a join
/// that returns `PTHREAD_CANCELED` tells how the thread ended.
fn join(ev: &mut Ev, thread: usize, retval: usize, call: impl FnOnce() -> usize) -> usize {
    let r = blocking(ev, OBJ_THREAD, STATE_BLOCKED_JOIN, thread, Busy::Slow, false, |r| r as i32 == 0, call);
    if r as i32 != 0 {
        return r;
    }
    // Safety: on success the program's retval pointer (if any) holds the thread's value.
    let value = (retval != 0).then(|| unsafe { core::ptr::read_volatile(retval as *const usize) });
    // None: not measuring, or a handler interrupted registration on this thread: leave the
    // record.
    let Some(guard) = ev.rt.lock_registration(ev.tid) else {
        return r;
    };
    if let Some(t) = threads::find_column(ev.rt, &guard, thread as u64, 4096) {
        // Safety: the joined thread is gone (pthread_join returned), so nobody else writes
        // its column now, and we hold the registration lock, which other writers of a
        // record not their own take.
        let t = unsafe { &mut *t };
        if t.exit_kind == EXIT_UNKNOWN {
            let now = sys::rdtsc();
            if value == Some(PTHREAD_CANCELED) {
                t.exit_kind = EXIT_CANCELED;
                t.exit_value = PTHREAD_CANCELED as u64;
            }
            if t.end_monotonic_ns == 0 {
                t.end_monotonic_ns = sys::clock_ns(sys::CLOCK_MONOTONIC);
            }
            if t.thread_state != STATE_EXITED {
                close_state(t, STATE_EXITED, u32::MAX, now);
                t.last_tsc = now;
            }
        }
    }
    drop(guard);
    r
}

/// pthread_create (thread, attr, start, arg): the new thread starts in `thread_start`.
fn create(ev: &mut Ev, a: [usize; 4], real: Real) -> usize {
    let Some(slot) = threads::claim_start(ev.rt, ev.tid, a[2] as u64, a[3] as u64) else {
        // Safety: the caller's arguments, unchanged.
        return unsafe { real(a[0], a[1], a[2], a[3]) };
    };
    let shim = thread_start as *const () as usize;
    // Safety: the real pthread_create with our start routine and argument.
    let r = unsafe { real(a[0], a[1], shim, slot) };
    if r as i32 != 0 {
        threads::release_start(slot);
    }
    r
}

/// The start routine of every thread created through the wrapper. The thread registers at
/// its first instrumented event as any thread does (so its first function is what it ran
/// first); registration takes the creator and the start routine from the slot, which the
/// thread marks with its thread pointer.
extern "C" fn thread_start(slot: usize) -> usize {
    let tp = sys::thread_pointer();
    // Safety: `create` claimed and filled the slot and passed it to pthread_create.
    let (start, arg, config) = unsafe { threads::start_from_slot(slot, tp) };
    {
        // Safety: `create` stored the config block of the program whose wrapper ran.
        let rt = unsafe { Rt::enter(config as *const RtConfig) };
        if let Some(col) = threads::registered_column(&rt) {
            // Registered already (a static program's libc runs instrumented code first).
            threads::take_pending_start(&rt, tp, col.h);
        }
    }
    // Safety: the program's start routine, as given to pthread_create.
    let routine = unsafe { core::mem::transmute::<u64, extern "C" fn(usize) -> usize>(start) };
    let ret = routine(arg as usize);
    // Safety: as above.
    unsafe { threads::end_slot(slot, tp) };
    // Safety: `create` stored the config block of the program whose wrapper ran.
    let rt = unsafe { Rt::enter(config as *const RtConfig) };
    if let Some(mut col) = threads::registered_column(&rt) {
        let mut ev = Ev { rt: &rt, col: &mut col, gate: 0, ra: 0, tid: 0, resolving: false };
        thread_end(&mut ev, EXIT_RETURNED, ret as u64);
    }
    ret
}

/// The thread ends (returned from its start routine or called pthread_exit).
fn thread_end(ev: &mut Ev, kind: u32, value: u64) {
    if ev.col.h.thread_state == STATE_EXITED {
        // Recorded already: musl's thread start-up calls `pthread_exit` with what the start
        // routine (our shim, which recorded the return) returned; a static program's
        // wrapper sees that call.
        return;
    }
    if !ev.begin() {
        return;
    }
    let now = sys::rdtsc();
    ev.col.h.exit_kind = kind;
    ev.col.h.exit_value = value;
    ev.col.h.end_monotonic_ns = sys::clock_ns(sys::CLOCK_MONOTONIC);
    threads::record_schedstat(ev.col.h);
    transition(ev, STATE_EXITED, None, now);
    ev.col.h.last_tsc = now;
    ev.end();
}

/// pthread_setname_np succeeded: record the name on the thread's column, or keep it for
/// the thread's registration if it has none yet.
fn set_name(ev: &mut Ev, thread: u64, name: *const u8) {
    let mut n = [0u8; 16];
    for (i, d) in n.iter_mut().take(15).enumerate() {
        // Safety: a NUL-terminated string the real call accepted (at most 15 bytes + NUL).
        let b = unsafe { core::ptr::read(name.add(i)) };
        if b == 0 {
            break;
        }
        *d = b;
    }
    let rules = control::has_name_rules(ev.rt);
    if thread == sys::thread_pointer() {
        ev.col.h.name = n;
        if rules {
            ev.col.h.thread_mask = control::thread_mask(ev.rt, ev.col.h.tid, &n);
            threads::arm_calls_path(ev.rt, &mut *ev.col.h);
        }
        return;
    }
    let Some(mut guard) = ev.rt.lock_registration(ev.tid) else {
        return;
    };
    match threads::find_column(ev.rt, &guard, thread, 4096) {
        // Safety: a column of this process, another thread's: written field by field (no
        // reference to its header), under the registration lock; the name is only ever
        // written whole by setname.
        Some(c) => unsafe {
            (&raw mut (*c).name).write_volatile(n);
            if rules {
                let tid = (&raw const (*c).tid).read();
                (&raw mut (*c).thread_mask).write_volatile(control::thread_mask(ev.rt, tid, &n));
                // Its calls-only path asks the runtime next, which arms it for the new mask.
                (&raw mut (*c).owner_tpx).write_volatile(0);
            }
        },
        None => threads::remember_name(&mut guard, thread, n),
    }
    drop(guard);
}

/// A wait longer than this was contended (a call that ran the lazy-binding resolver first
/// gets `RESOLVER_NS` more).
fn contended_ticks(ev: &Ev) -> u64 {
    let ns = if ev.resolving { CONTENDED_NS + RESOLVER_NS } else { CONTENDED_NS };
    ev.rt.st.tsc_hz() / 1000 * ns / 1_000_000
}

/// Enter `state` (blocked on `obj`) at TSC `now`, closing the current state's interval.
fn transition(ev: &mut Ev, state: u32, obj: Option<u32>, now: u64) {
    let object = obj.unwrap_or(u32::MAX);
    close_state(ev.col.h, state, object, now);
    if ev.gate & TRACE != 0 {
        ev.col.push_transition(Transition { tsc: now, state, object });
    }
}

fn close_state(c: &mut ColumnHeader, state: u32, obj: u32, now: u64) {
    if let Some(t) = c.state_ticks.get_mut(c.thread_state as usize) {
        *t = t.wrapping_add(now.saturating_sub(c.state_since));
    }
    c.thread_state = state;
    c.state_object = obj;
    c.state_since = now;
}

/// The file's shared sync-object table: hash buckets of chains of [`SyncObject`]s.
struct Objects {
    hdr: *mut FileHeader,
    buckets: *mut ObjBucket,
    objects: *mut SyncObject,
    n_buckets: u32,
    cap: u32,
}

impl Objects {
    fn of(rt: &Rt) -> Option<Objects> {
        let hdr = rt.file_header()?;
        // Safety: fields of the mapped header written once at start.
        let (objects_offset, n_buckets, cap) = unsafe { ((*hdr).objects_offset, (*hdr).obj_buckets, (*hdr).obj_cap) };
        if n_buckets == 0 || cap == 0 {
            return None;
        }
        let buckets = (hdr as usize + objects_offset as usize) as *mut ObjBucket;
        let objects = (buckets as usize + n_buckets as usize * core::mem::size_of::<ObjBucket>()) as *mut SyncObject;
        Some(Objects { hdr, buckets, objects, n_buckets, cap })
    }

    /// Object `i`'s address, once its entry is complete.
    fn address(&self, i: u32) -> Option<u64> {
        if i >= self.cap {
            return None;
        }
        // Safety: index checked against the table's capacity; aligned u32 in the mapping;
        // the rest of the entry is complete once `kind` is (release/acquire) and never
        // changes after.
        let o = unsafe { self.objects.add(i as usize) };
        // Safety: as above.
        let k = unsafe { AtomicU32::from_ptr(&raw mut (*o).kind) }.load(Ordering::Acquire);
        // Safety: as above.
        (k != 0).then(|| unsafe { (*o).address })
    }
}

/// The index of the sync object (`kind`, `addr`), entered into the table if new. The table
/// is shared by every thread: it is reached through raw pointers and atomics only.
fn object(ev: &mut Ev, kind: u32, addr: usize) -> Option<u32> {
    let Objects { hdr, buckets, objects, n_buckets, cap } = Objects::of(ev.rt)?;
    let hash = ((addr as u64 >> 3) ^ kind as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 32;
    let nb = n_buckets as u64;
    let b = if nb.is_power_of_two() { hash & (nb - 1) } else { hash % nb };
    // Safety: the bucket lies inside the table.
    let bucket = unsafe { buckets.add(b as usize) };
    // Safety: aligned u32s in the mapping.
    let (head, lock_word) =
        unsafe { (AtomicU32::from_ptr(&raw mut (*bucket).head), AtomicU32::from_ptr(&raw mut (*bucket).lock)) };
    let find = |mut i: u32| -> Option<u32> {
        let mut steps = 0;
        while i != 0 && i <= cap && steps < cap {
            // Safety: index checked against the table's capacity.
            let o = unsafe { objects.add(i as usize - 1) };
            // Safety: aligned u32 in the mapping; the rest of the entry is complete once
            // `kind` is (release/acquire) and never changes after.
            let k = unsafe { AtomicU32::from_ptr(&raw mut (*o).kind) }.load(Ordering::Acquire);
            // Safety: as above.
            let (address, next) = unsafe { ((*o).address, (*o).next) };
            if k == kind && address == addr as u64 {
                return Some(i - 1);
            }
            i = next;
            steps += 1;
        }
        None
    };
    if let Some(i) = find(head.load(Ordering::Acquire)) {
        return Some(i);
    }
    let lock = TcLock::new(lock_word);
    if lock.acquire(ev.tid) != TcAcquire::Yes {
        // Safety: aligned u64 in the mapping.
        unsafe { AtomicU64::from_ptr(&raw mut (*hdr).skipped_reentrant) }.fetch_add(1, Ordering::Relaxed);
        return None;
    }
    let first = head.load(Ordering::Acquire);
    let found = find(first);
    let out = found.or_else(|| {
        // Safety: aligned u32 in the mapping.
        let n = unsafe { AtomicU32::from_ptr(&raw mut (*hdr).n_objects) }.fetch_add(1, Ordering::Relaxed);
        if n >= cap {
            // Safety: aligned u64 in the mapping.
            unsafe { AtomicU64::from_ptr(&raw mut (*hdr).objects_lost) }.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        // Safety: entry n is ours alone (fetch_add), inside the table; readers look at it
        // only after `kind` is stored (release).
        unsafe {
            let o = objects.add(n as usize);
            (*o).address = addr as u64;
            (*o).first_pc = (ev.ra as u64).wrapping_sub(ev.rt.cfg.bias());
            (*o).first_tid = ev.tid;
            (*o).next = first;
            AtomicU32::from_ptr(&raw mut (*o).kind).store(kind, Ordering::Release);
        }
        head.store(n + 1, Ordering::Release);
        Some(n)
    });
    lock.release();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Batches of a process whose calibration gave 0 before (under load, a bare batch was
    /// interrupted for 1.25 ms): wrapped and bare ticks of 1,000 pairs.
    const SEEN: [(u64, u64); 7] = [
        (91754, 11310),
        (91442, 11206),
        (91572, 11336),
        (91494, 11232),
        (91624, 11232),
        (91624, 1_263_808),
        (92664, 11388),
    ];

    #[test]
    fn a_disturbed_bare_batch_leaves_the_lock_event_figure_alone() {
        let quiet: [(u64, u64); 6] = [SEEN[0], SEEN[1], SEEN[2], SEEN[3], SEEN[4], SEEN[6]];
        let figure = lock_event_figure(&SEEN);
        // (91442 - 11206) ticks per 1,000 pairs, × CALIB_SCALE, per event.
        assert_eq!(figure, (91442 - 11206) * CALIB_SCALE / 1000 / 2);
        assert_eq!(figure, lock_event_figure(&quiet));
    }

    #[test]
    fn a_disturbed_wrapped_batch_does_not_raise_the_lock_event_figure() {
        let mut batches = SEEN;
        batches[1].0 += 500_000;
        // The next least wrapped batch (91494) is the figure's wrapped side now.
        assert_eq!(lock_event_figure(&batches), (91494 - 11206) * CALIB_SCALE / 1000 / 2);
    }
}
