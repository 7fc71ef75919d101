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
//! the caller. Nothing on the program's stack is changed (D1); unwinding through the
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
#![allow(unsafe_code)]

use crate::runtime::{self, Cfg, RtState, TcAcquire};
use crate::sys;
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

pub const PENDING_CAP: usize = 64;
pub const NAMES_CAP: usize = 16;

/// A start routine on its way from `pthread_create` to the new thread.
#[repr(C)]
pub struct PendingStart {
    /// 0 free, 1 taken.
    used: u32,
    creator_tid: u32,
    start: u64,
    arg: u64,
    config: u64,
    /// Thread pointer of the new thread once it runs; its registration takes the record.
    tp: u64,
}

/// A name given (pthread_setname_np) to a thread that had not registered yet.
#[repr(C)]
pub struct PendingName {
    tp: u64,
    name: [u8; 16],
}

const fn bit(m: u32) -> u8 {
    metric_bit(m)
}
const WAIT: u8 = bit(METRIC_LOCK_WAIT);
const HOLD: u8 = bit(METRIC_LOCK_HOLD);
const TRACE: u8 = bit(METRIC_STATE_TRACE);

/// One wrapped call on one thread.
struct Ev {
    config: Cfg,
    col: *mut ColumnHeader,
    gate: u8,
    /// The caller's return address (run time).
    ra: usize,
    tid: u32,
    /// The dynamic linker resolves the import during this call: its time is not a wait.
    resolving: bool,
}

impl Ev {
    // The column is memory of the profile mapping that only this thread writes (raw
    // pointer, like the trampolines' gs: accesses), not data owned by the Ev.
    #[allow(clippy::mut_from_ref)]
    fn col(&self) -> &mut ColumnHeader {
        // Safety: the thread's own column (or, for `join`'s target, a dead thread's).
        unsafe { &mut *self.col }
    }

    /// Start bookkeeping on the column; false if a signal handler interrupted bookkeeping
    /// (or a timer routine) on this thread: the event is skipped and counted (D7).
    fn begin(&self) -> bool {
        // Safety: aligned u32 of the thread's own column.
        let busy = unsafe { AtomicU32::from_ptr(&mut self.col().busy) };
        if busy.load(Ordering::Relaxed) != 0 {
            let c = self.col();
            c.wrap_skipped = c.wrap_skipped.wrapping_add(1);
            return false;
        }
        busy.store(1, Ordering::Relaxed);
        compiler_fence(Ordering::SeqCst);
        true
    }

    fn end(&self) {
        compiler_fence(Ordering::SeqCst);
        // Safety: as in `begin`.
        unsafe { AtomicU32::from_ptr(&mut self.col().busy) }.store(0, Ordering::Relaxed);
    }

    fn tracks_state(&self) -> bool {
        self.gate & (WAIT | TRACE) != 0
    }
}

/// See `stint_rt_wrap`.
///
/// # Safety
/// `site` is a rewriter-emitted descriptor.
pub unsafe fn wrap(a: [usize; 4], ra: usize, site: *const WrapSite) -> usize {
    // Safety: the descriptor is in our read-only segment.
    let s = unsafe { &*site };
    let base = site as *const u8;
    let config = Cfg(base.wrapping_offset(s.config_rel as isize) as *const RtConfig);
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
    // Safety: calling the real function with the caller's arguments.
    let call = || unsafe { real(a[0], a[1], a[2], a[3]) };
    if s.point >= config.n_points {
        return call();
    }
    // Safety: the control region holds n_points gate bytes.
    let gate = unsafe { core::ptr::read_volatile(runtime::at::<u8>(config, config.ctl_rel).add(s.point as usize)) };
    // Safety: start-up has run (the thunk only comes here with a gate bit on).
    let Some(col) = (unsafe { runtime::own_column(config, s.point) }) else {
        return call();
    };
    // Safety: the thread's own column.
    let c = unsafe { &mut *col };
    crate::control::safe_point(config, c);
    let gate = gate & c.thread_mask as u8;
    if gate & bit(METRIC_CALLS) != 0 {
        let off = counter_offset(config.n_points, SLOT_CALLS, s.point) as usize;
        // Safety: the counter lies inside the column; only this thread writes it.
        unsafe {
            let p = (col as *mut u8).add(off) as *mut u64;
            core::ptr::write_volatile(p, core::ptr::read_volatile(p).wrapping_add(1));
        }
    }
    let ev = Ev { config, col, gate, ra, tid: c.tid, resolving };
    let ok0 = |r: usize| r as i32 == 0;
    match s.func {
        WRAP_PTHREAD_CREATE => create(&ev, a, real),
        WRAP_PTHREAD_EXIT => {
            thread_end(&ev, EXIT_PTHREAD_EXIT, a[0] as u64);
            call()
        }
        WRAP_PTHREAD_JOIN | WRAP_TIMEDJOIN_NP => join(&ev, a[0], a[1], call),
        WRAP_MUTEX_LOCK | WRAP_MUTEX_TIMEDLOCK => {
            blocking(&ev, OBJ_MUTEX, STATE_BLOCKED_MUTEX, a[0], Busy::LockWord, true, ok0, call)
        }
        WRAP_MUTEX_TRYLOCK => attempt(&ev, OBJ_MUTEX, a[0], true, ok0, call),
        WRAP_MUTEX_UNLOCK => release(&ev, OBJ_MUTEX, a[0], call),
        WRAP_COND_WAIT | WRAP_COND_TIMEDWAIT | WRAP_COND_CLOCKWAIT => cond_wait(&ev, a[0], a[1], call),
        WRAP_RWLOCK_RDLOCK | WRAP_RWLOCK_WRLOCK | WRAP_RWLOCK_TIMEDRDLOCK | WRAP_RWLOCK_TIMEDWRLOCK => {
            blocking(&ev, OBJ_RWLOCK, STATE_BLOCKED_RWLOCK, a[0], Busy::Slow, true, ok0, call)
        }
        WRAP_RWLOCK_TRYRDLOCK | WRAP_RWLOCK_TRYWRLOCK => attempt(&ev, OBJ_RWLOCK, a[0], true, ok0, call),
        WRAP_RWLOCK_UNLOCK => release(&ev, OBJ_RWLOCK, a[0], call),
        WRAP_SEM_WAIT | WRAP_SEM_TIMEDWAIT => {
            blocking(&ev, OBJ_SEMAPHORE, STATE_BLOCKED_SEMAPHORE, a[0], Busy::Slow, false, ok0, call)
        }
        WRAP_SEM_TRYWAIT => attempt(&ev, OBJ_SEMAPHORE, a[0], false, ok0, call),
        WRAP_BARRIER_WAIT => blocking(
            &ev,
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
                set_name(&ev, a[0] as u64, a[1] as *const u8);
            }
            r
        }
        // signal, broadcast, post: nothing waits, but the object is used (first used in).
        WRAP_COND_SIGNAL | WRAP_COND_BROADCAST | WRAP_SEM_POST => {
            if gate & WAIT != 0 && ev.begin() {
                let kind = if s.func == WRAP_SEM_POST { OBJ_SEMAPHORE } else { OBJ_CONDVAR };
                object(&ev, kind, a[0]);
                ev.end();
            }
            call()
        }
        _ => call(),
    }
}

/// How a call tells it found the object busy.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Busy {
    /// glibc's mutex lock word (the first int of `pthread_mutex_t`) was non-zero.
    LockWord,
    /// The call blocked longer than `CONTENDED_NS`.
    Slow,
}

/// A call that may block on `addr` (`kind`): the thread is in `state` while inside.
#[allow(clippy::too_many_arguments)]
fn blocking(
    ev: &Ev,
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
        busy == Busy::LockWord && addr != 0 && unsafe { core::ptr::read_volatile(addr as *const u32) } != 0;
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
            if let Some(e) = wait_entry(ev, obj, kind) {
                e.count += acquired as u64;
            }
        }
        if holds && acquired && ev.gate & HOLD != 0 {
            let now = sys::rdtsc();
            push_held(ev, obj, now);
            ev.col().last_tsc = now;
        }
        ev.end();
        return r;
    }
    let c = ev.col();
    let (prev, prev_obj) = (c.thread_state, c.state_object);
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
        if let Some(e) = wait_entry(ev, obj, kind) {
            let slow = t1.wrapping_sub(t0) > contended_ticks(ev);
            e.count += acquired as u64;
            e.contended += (found_locked || (busy == Busy::Slow && slow)) as u64;
            e.wait_ticks = e.wait_ticks.wrapping_add(t1.wrapping_sub(t0));
        }
    }
    if holds && acquired && ev.gate & HOLD != 0 {
        push_held(ev, obj, t1);
    }
    ev.col().last_tsc = t1;
    ev.end();
    r
}

/// A try-call (trylock, tryrdlock, sem_trywait): never blocks; a failure means the object
/// was busy.
fn attempt(
    ev: &Ev,
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
        if let Some(e) = wait_entry(ev, obj, kind) {
            e.count += acquired as u64;
            e.contended += (!acquired && (r as i32 == EBUSY || r as i32 == -1)) as u64;
        }
    }
    if holds && acquired && ev.gate & HOLD != 0 {
        push_held(ev, obj, now);
    }
    ev.col().last_tsc = now;
    ev.end();
    r
}

/// An unlock: closes the hold interval, then unlocks.
fn release(ev: &Ev, kind: u32, addr: usize, call: impl FnOnce() -> usize) -> usize {
    if ev.gate & HOLD != 0 && ev.col().n_held != 0 && ev.begin() {
        let obj = object(ev, kind, addr);
        let now = sys::rdtsc();
        if let Some(since) = pop_held(ev, obj) {
            if let Some(e) = wait_entry(ev, obj, kind) {
                e.hold_ticks = e.hold_ticks.wrapping_add(now.wrapping_sub(since));
            }
        }
        ev.end();
    }
    call()
}

/// pthread_cond_wait / timedwait / clockwait (cond, mutex, …): the mutex is given back for
/// the wait, so its hold interval pauses.
fn cond_wait(ev: &Ev, cond: usize, mutex: usize, call: impl FnOnce() -> usize) -> usize {
    let mut held: Option<u32> = None;
    if ev.gate & HOLD != 0 && ev.col().n_held != 0 && ev.begin() {
        let m = object(ev, OBJ_MUTEX, mutex);
        let now = sys::rdtsc();
        if let Some(since) = pop_held(ev, m) {
            if let Some(e) = wait_entry(ev, m, OBJ_MUTEX) {
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
        push_held(ev, held, sys::rdtsc()); // the wait returns with the mutex locked again
        ev.end();
    }
    r
}

/// pthread_join / pthread_timedjoin_np (thread, retval, …): a wait on the thread; a join
/// that returns `PTHREAD_CANCELED` tells how the thread ended.
fn join(ev: &Ev, thread: usize, retval: usize, call: impl FnOnce() -> usize) -> usize {
    let r = blocking(ev, OBJ_THREAD, STATE_BLOCKED_JOIN, thread, Busy::Slow, false, |r| r as i32 == 0, call);
    if r as i32 != 0 {
        return r;
    }
    // Safety: on success the program's retval pointer (if any) holds the thread's value.
    let value = (retval != 0).then(|| unsafe { core::ptr::read_volatile(retval as *const usize) });
    let Some(lock) = runtime::reg_lock(ev.config) else {
        return r;
    };
    if lock.acquire(ev.tid) != TcAcquire::Yes {
        return r; // a handler interrupted registration on this thread: leave the record
    }
    if let Some(t) = runtime::find_column(ev.config, thread as u64, 4096) {
        // Safety: the joined thread is gone; nobody else writes its column now.
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
    lock.release();
    r
}

/// pthread_create (thread, attr, start, arg): the new thread starts in `thread_start`.
fn create(ev: &Ev, a: [usize; 4], real: Real) -> usize {
    // Safety: see `runtime::state`.
    let st = unsafe { runtime::state(ev.config) };
    let Some(slot) = claim_pending(st) else {
        // Safety: the caller's arguments, unchanged.
        return unsafe { real(a[0], a[1], a[2], a[3]) };
    };
    slot.creator_tid = ev.tid;
    slot.start = a[2] as u64;
    slot.arg = a[3] as u64;
    slot.config = ev.config.0 as u64;
    slot.tp = 0;
    let shim = thread_start as *const () as usize;
    // Safety: the real pthread_create with our start routine and argument.
    let r = unsafe { real(a[0], a[1], shim, slot as *mut PendingStart as usize) };
    if r as i32 != 0 {
        // Safety: aligned u32 in the runtime state.
        unsafe { AtomicU32::from_ptr(&mut slot.used) }.store(0, Ordering::Release);
    }
    r
}

fn claim_pending(st: &mut RtState) -> Option<&mut PendingStart> {
    for p in st.pending.iter_mut() {
        // Safety: aligned u32 in the runtime state.
        let used = unsafe { AtomicU32::from_ptr(&mut p.used) };
        if used.compare_exchange(0, 1, Ordering::Acquire, Ordering::Relaxed).is_ok() {
            return Some(p);
        }
    }
    None
}

/// The start routine of every thread created through the wrapper. The thread registers at
/// its first instrumented event as any thread does (so its first function is what it ran
/// first); registration takes the creator and the start routine from the slot, which the
/// thread marks with its thread pointer.
extern "C" fn thread_start(arg: usize) -> usize {
    let p = arg as *mut PendingStart;
    let tp = sys::thread_pointer();
    // Safety: `create` filled the slot before pthread_create; this thread owns it now.
    let (start, sarg, config) = unsafe { ((*p).start, (*p).arg, (*p).config) };
    // Safety: as above; only this thread's registration reads `tp`.
    unsafe { core::ptr::write_volatile(&mut (*p).tp, tp) };
    let config = Cfg(config as *const RtConfig);
    // Safety: the program's start routine and argument.
    let routine = unsafe { core::mem::transmute::<u64, extern "C" fn(usize) -> usize>(start) };
    let ret = routine(sarg as usize);
    // Safety: as above.
    unsafe {
        if core::ptr::read_volatile(&(*p).tp) == tp {
            // Never registered (ran no instrumented code): give the slot back.
            core::ptr::write_volatile(&mut (*p).tp, 0);
            AtomicU32::from_ptr(&mut (*p).used).store(0, Ordering::Release);
        }
    }
    if let Some(col) = runtime::registered_column(config) {
        let ev = Ev { config, col, gate: 0, ra: 0, tid: 0, resolving: false };
        thread_end(&ev, EXIT_RETURNED, ret as u64);
    }
    ret
}

/// Registration of thread `tp`: the creator and start routine its slot holds, if any.
pub(crate) fn take_pending_start(config: Cfg, st: &mut RtState, tp: u64, col: &mut ColumnHeader) {
    for p in st.pending.iter_mut() {
        // Safety: aligned u32 in the runtime state.
        let used = unsafe { AtomicU32::from_ptr(&mut p.used) };
        // Safety: `tp` is written by the slot's thread, which is the one registering.
        if used.load(Ordering::Acquire) == 1 && unsafe { core::ptr::read_volatile(&p.tp) } == tp && tp != 0 {
            col.creator_tid = p.creator_tid;
            col.start_routine = p.start.wrapping_sub(bias(config));
            // Safety: as above.
            unsafe { core::ptr::write_volatile(&mut p.tp, 0) };
            used.store(0, Ordering::Release);
            return;
        }
    }
}

/// The thread ends (returned from its start routine or called pthread_exit).
fn thread_end(ev: &Ev, kind: u32, value: u64) {
    if !ev.begin() {
        return;
    }
    let now = sys::rdtsc();
    let c = ev.col();
    c.exit_kind = kind;
    c.exit_value = value;
    c.end_monotonic_ns = sys::clock_ns(sys::CLOCK_MONOTONIC);
    transition(ev, STATE_EXITED, None, now);
    ev.col().last_tsc = now;
    ev.end();
}

/// pthread_setname_np succeeded: record the name on the thread's column, or keep it for
/// the thread's registration if it has none yet.
fn set_name(ev: &Ev, thread: u64, name: *const u8) {
    let mut n = [0u8; 16];
    for (i, d) in n.iter_mut().take(15).enumerate() {
        // Safety: a NUL-terminated string the real call accepted (at most 15 bytes + NUL).
        let b = unsafe { core::ptr::read(name.add(i)) };
        if b == 0 {
            break;
        }
        *d = b;
    }
    let rules = crate::control::has_name_rules(ev.config);
    if thread == sys::thread_pointer() {
        let c = ev.col();
        c.name = n;
        if rules {
            c.thread_mask = crate::control::thread_mask(ev.config, c.tid, &n);
        }
        return;
    }
    let Some(lock) = runtime::reg_lock(ev.config) else {
        return;
    };
    if lock.acquire(ev.tid) != TcAcquire::Yes {
        return;
    }
    match runtime::find_column(ev.config, thread, 4096) {
        // Safety: a column of this process; the name is only ever written whole by setname.
        Some(c) => unsafe {
            (*c).name = n;
            if rules {
                (*c).thread_mask = crate::control::thread_mask(ev.config, (*c).tid, &n);
            }
        },
        None => {
            // Safety: see `runtime::state`; we hold reg_lock, which guards `names`.
            let st = unsafe { runtime::state(ev.config) };
            let slot = st.names.iter().position(|p| p.tp == thread || p.tp == 0).unwrap_or(0);
            st.names[slot] = PendingName { tp: thread, name: n };
        }
    }
    lock.release();
}

/// Registration (holding reg_lock): a name given to this thread before it registered.
pub(crate) fn take_pending_name(st: &mut RtState, tp: u64, name: &mut [u8; 16]) {
    if let Some(p) = st.names.iter_mut().find(|p| p.tp == tp && tp != 0) {
        *name = p.name;
        p.tp = 0;
    }
}

fn bias(config: Cfg) -> u64 {
    (config.0 as u64).wrapping_sub(config.link_addr)
}

/// A wait longer than this was contended (a call that ran the lazy-binding resolver first
/// gets `RESOLVER_NS` more).
fn contended_ticks(ev: &Ev) -> u64 {
    let ns = if ev.resolving { CONTENDED_NS + RESOLVER_NS } else { CONTENDED_NS };
    runtime::tsc_hz(ev.config) / 1000 * ns / 1_000_000
}

/// Enter `state` (blocked on `obj`) at TSC `now`, closing the current state's interval.
fn transition(ev: &Ev, state: u32, obj: Option<u32>, now: u64) {
    let c = ev.col();
    close_state(c, state, obj.unwrap_or(u32::MAX), now);
    if ev.gate & TRACE != 0 {
        let i = (c.ring_head % RING_CAP as u64) as usize;
        let off = RING_OFFSET as usize + i * core::mem::size_of::<Transition>();
        // Safety: the ring lies inside the column.
        unsafe {
            let t = (ev.col as *mut u8).add(off) as *mut Transition;
            core::ptr::write_volatile(t, Transition { tsc: now, state, object: obj.unwrap_or(u32::MAX) });
            AtomicU64::from_ptr(&mut c.ring_head).store(c.ring_head.wrapping_add(1), Ordering::Release);
        }
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

/// The index of the sync object (`kind`, `addr`), entered into the table if new.
fn object(ev: &Ev, kind: u32, addr: usize) -> Option<u32> {
    let hdr = runtime::file_header(ev.config)?;
    // Safety: the header is mapped; its table fields were written at start.
    let h = unsafe { &*hdr };
    if h.obj_buckets == 0 || h.obj_cap == 0 {
        return None;
    }
    let buckets = (hdr as usize + h.objects_offset as usize) as *mut ObjBucket;
    let objects = (buckets as usize + h.obj_buckets as usize * core::mem::size_of::<ObjBucket>()) as *mut SyncObject;
    let hash = ((addr as u64 >> 3) ^ kind as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 32;
    let n_buckets = h.obj_buckets as u64;
    let b = if n_buckets.is_power_of_two() { hash & (n_buckets - 1) } else { hash % n_buckets };
    // Safety: the bucket lies inside the table.
    let bucket = unsafe { &mut *buckets.add(b as usize) };
    // Safety: aligned u32 in the mapping.
    let head = unsafe { AtomicU32::from_ptr(&mut bucket.head) };
    let find = |mut i: u32| -> Option<u32> {
        let mut steps = 0;
        while i != 0 && i <= h.obj_cap && steps < h.obj_cap {
            // Safety: index checked against the table's capacity.
            let o = unsafe { &*objects.add(i as usize - 1) };
            // Safety: aligned u32 in the mapping.
            let k = unsafe { AtomicU32::from_ptr(&o.kind as *const u32 as *mut u32) }.load(Ordering::Acquire);
            if k == kind && o.address == addr as u64 {
                return Some(i - 1);
            }
            i = o.next;
            steps += 1;
        }
        None
    };
    if let Some(i) = find(head.load(Ordering::Acquire)) {
        return Some(i);
    }
    // Safety: aligned u32 in the mapping.
    let lock = runtime::TcLock::new(unsafe { AtomicU32::from_ptr(&mut bucket.lock) });
    if lock.acquire(ev.tid) != TcAcquire::Yes {
        // Safety: aligned u64 in the mapping.
        unsafe { AtomicU64::from_ptr(&mut (*hdr).skipped_reentrant) }.fetch_add(1, Ordering::Relaxed);
        return None;
    }
    let first = head.load(Ordering::Acquire);
    let found = find(first);
    let out = found.or_else(|| {
        // Safety: aligned u32 in the mapping.
        let n = unsafe { AtomicU32::from_ptr(&mut (*hdr).n_objects) }.fetch_add(1, Ordering::Relaxed);
        if n >= h.obj_cap {
            // Safety: aligned u64 in the mapping.
            unsafe { AtomicU64::from_ptr(&mut (*hdr).objects_lost) }.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        // Safety: entry n is ours alone (fetch_add), inside the table.
        let o = unsafe { &mut *objects.add(n as usize) };
        o.address = addr as u64;
        o.first_pc = (ev.ra as u64).wrapping_sub(bias(ev.config));
        o.first_tid = ev.tid;
        o.next = first;
        // Safety: aligned u32 in the mapping.
        unsafe { AtomicU32::from_ptr(&mut o.kind) }.store(kind, Ordering::Release);
        head.store(n + 1, Ordering::Release);
        Some(n)
    });
    lock.release();
    out
}

/// The thread's wait-table entry for object `obj`, claimed if new (`None`: no object, or
/// the table is full — counted in `wrap_skipped`).
#[allow(clippy::mut_from_ref)] // an entry of the thread's own column, see `Ev::col`
fn wait_entry(ev: &Ev, obj: Option<u32>, kind: u32) -> Option<&mut WaitEntry> {
    let obj = obj?;
    let table = (ev.col as usize + WAITS_OFFSET as usize) as *mut WaitEntry;
    let start = (obj.wrapping_mul(0x9e37_79b1) >> 8) % WAIT_CAP;
    for k in 0..WAIT_CAP {
        // Safety: index below WAIT_CAP: inside the column's wait table.
        let e = unsafe { &mut *table.add(((start + k) % WAIT_CAP) as usize) };
        if e.object == obj + 1 {
            return Some(e);
        }
        if e.object == 0 {
            e.kind = kind;
            // Safety: aligned u32 in the column; readers see the kind before the object.
            unsafe { AtomicU32::from_ptr(&mut e.object) }.store(obj + 1, Ordering::Release);
            return Some(e);
        }
    }
    let c = ev.col();
    c.wrap_skipped = c.wrap_skipped.wrapping_add(1);
    None
}

fn held_table(ev: &Ev) -> *mut Held {
    (ev.col as usize + HELD_OFFSET as usize) as *mut Held
}

fn push_held(ev: &Ev, obj: Option<u32>, now: u64) {
    let Some(obj) = obj else { return };
    let c = ev.col();
    if c.n_held < HELD_CAP {
        // Safety: index below HELD_CAP.
        unsafe { *held_table(ev).add(c.n_held as usize) = Held { object: obj, _pad: 0, since: now } };
    }
    c.n_held = c.n_held.saturating_add(1);
}

/// Remove the innermost open hold of `obj`; its start time.
fn pop_held(ev: &Ev, obj: Option<u32>) -> Option<u64> {
    let obj = obj?;
    let c = ev.col();
    let kept = c.n_held.min(HELD_CAP) as usize;
    let t = held_table(ev);
    for i in (0..kept).rev() {
        // Safety: index below HELD_CAP.
        let h = unsafe { *t.add(i) };
        if h.object == obj {
            for j in i..kept - 1 {
                // Safety: indices below HELD_CAP.
                unsafe { *t.add(j) = *t.add(j + 1) };
            }
            c.n_held -= 1;
            return Some(h.since);
        }
    }
    if c.n_held as usize > kept {
        c.n_held -= 1; // one of the holds that did not fit
    }
    None
}
