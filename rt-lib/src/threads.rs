//! Threads (D8): which column a thread writes, registration of a new thread, the hand-off of
//! start routines and names from the wrappers, and noticing a fork.
//!
//! Every thread's GS base points at a column header. Start-up points the main thread at
//! the dummy header in `RtState`, whose owner matches no thread; new threads inherit
//! their creator's GS base, which also does not match them (its owner is another thread or
//! the dummy). The first event of a thread therefore misses in the trampoline and lands in
//! [`slow`], which gives it a fresh column under the thread-conscious registration lock.
//! A thread on a stack glibc recycled has the thread pointer of a dead thread but a new tid,
//! so the tid word in the key sends it here too; columns are never reused.
//!
//! # Shared and per-thread
//! A column is written by its own thread only (the returned [`Column`] is that thread's);
//! the file header's column count, the registration lock and the file's growth are shared
//! and change under the lock or with atomics. The wrappers write another thread's record
//! (its name, how it ended) only under the registration lock, field by field.
//!
//! Layering: uses `sys`, `state`, `column`, `clock`, `control`, `process` and `profile_file`; used by
//! `timer`, `wrap` and the entry points.
#![allow(unsafe_code)]

use crate::clock;
use crate::column::{Column, CCT_INITIAL_MASK, SHADOW_FIRST_PAGE};
use crate::control;
use crate::process;
use crate::profile_file;
use crate::state::{RegGuard, Rt};
use crate::sys;
use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use stint_layout::{
    baseline_offset, cct_index_offset, metric_bit, ColumnHeader, CFG_NO_CPU_CLOCK, CFG_NO_TIMERS, COLUMN_LIVE,
    COUNTERS_OFFSET, FLAG_FORK_CHILD, FLAG_TID_KEY_VERIFIED, METRIC_CALLS, PAGE, STATE_RUN,
};

/// The hot-path key word for this thread: what the trampoline compares with `owner_key`.
fn key(rt: &Rt, tp: u64) -> u32 {
    if rt.cfg.tid_offset != 0 {
        // Safety: tid_offset is only set for glibc programs, whose thread control block is
        // larger than the offset (start-up checked the word against gettid()).
        unsafe { sys::fs_u32(rt.cfg.tid_offset) }
    } else {
        tp as u32
    }
}

// ---- The calls-only entry path (`ColumnHeader::owner_tpx`) ----

const CALLS_BIT: u32 = metric_bit(METRIC_CALLS) as u32;

/// Arms this thread's calls-only entry path in its own column `h`: `owner_tp ^ cookie` while
/// there is a cookie and the thread's mask counts calls, else 0 (every calls-only entry then
/// asks the runtime, which applies the mask).
pub fn arm_calls_path(rt: &Rt, h: *mut ColumnHeader) {
    // Safety: `h` is the calling thread's own column header; `stint ctl` may write
    // `thread_mask` and `owner_tpx` meanwhile (aligned words, read and written whole).
    unsafe {
        let cookie = core::ptr::read_volatile(crate::state::cookie_word(rt));
        let (mask_word, tpx) = (&raw const (*h).thread_mask, &raw mut (*h).owner_tpx);
        let mask = || core::ptr::read_volatile(mask_word);
        if cookie == 0 || mask() & CALLS_BIT == 0 {
            core::ptr::write_volatile(tpx, 0);
            return;
        }
        core::ptr::write_volatile(tpx, (*h).owner_tp ^ cookie);
        // `stint ctl` writes a mask, then 0 here: a mask read before its write is followed by
        // its 0, and one read after it sees the new mask.
        core::sync::atomic::fence(Ordering::SeqCst);
        if mask() & CALLS_BIT == 0 {
            core::ptr::write_volatile(tpx, 0);
        }
    }
}

/// The column GS points at, unless it is the dummy (or nothing).
fn gs_column(rt: &Rt) -> Option<*mut ColumnHeader> {
    // Safety: every thread's GS base points at a column header (start-up set the main
    // thread's; others inherit and only ever move to new columns).
    let cur = unsafe { sys::gs_self() } as *mut ColumnHeader;
    (!cur.is_null() && cur as u64 != rt.st.dummy_addr()).then_some(cur)
}

/// This thread's column if it has registered (never registers).
pub fn registered_column<'a>(rt: &Rt<'a>) -> Option<Column<'a>> {
    if !rt.st.active() {
        return None;
    }
    let cur = gs_column(rt)?;
    let tp = sys::thread_pointer();
    // Safety: `cur` is a column header of our mapping (the owner fields are read by value;
    // the owner writes them only at registration, `stint ctl` the key word).
    let (owner_tp, owner_key) = unsafe { ((*cur).owner_tp, (*cur).owner_key) };
    if owner_tp != tp || owner_key != key(rt, tp) {
        return None;
    }
    // Safety: the owner matches: it is this thread's own column, which only this thread
    // writes, mapped for the rest of the run; the caller is the one user of the handle.
    Some(unsafe { file_column(rt, cur) })
}

/// This thread's column, for a wrapper thunk's fast path: the thunk checked that GS is this
/// thread's column (its owner's thread pointer, and with a libc tid word the key: what
/// [`registered_column`] checks), so only whether the runtime measures is left to see.
/// Without a tid word the thunk left the key (which `stint ctl` moves to send the thread
/// to a safe point) unchecked: then everything is checked here.
pub fn thunk_checked_column<'a>(rt: &Rt<'a>) -> Option<Column<'a>> {
    if rt.cfg.tid_offset == 0 {
        return registered_column(rt);
    }
    if !rt.st.active() {
        return None;
    }
    let cur = gs_column(rt)?;
    // Safety: the thunk found `cur` owned by this thread (as `registered_column` would): its
    // own column, which only this thread writes, mapped for the rest of the run.
    Some(unsafe { file_column(rt, cur) })
}

/// The handle of column `cur` of the mapping, with the file its first writes allocate in.
///
/// # Safety
/// As [`Column::from_raw`].
pub unsafe fn file_column<'a>(rt: &Rt<'a>, cur: *mut ColumnHeader) -> Column<'a> {
    // Safety: forwarded contract.
    unsafe { Column::from_raw(cur, rt.cfg.geometry()) }.in_file(rt.st.fd(), rt.st.base())
}

/// This thread's column, registering the thread if needed (`None`: not measuring).
pub fn own_column<'a>(rt: &Rt<'a>, point: u32) -> Option<Column<'a>> {
    if let Some(c) = registered_column(rt) {
        return Some(c);
    }
    if !slow(rt, point) {
        return None;
    }
    // Safety: `slow` moved GS to this thread's column (see `registered_column`).
    gs_column(rt).map(|cur| unsafe { file_column(rt, cur) })
}

/// The newest live column of this process owned by thread pointer `tp` among the last
/// `limit` columns (a `pthread_t` names the thread whose stack it is; glibc recycles
/// stacks, so the newest is the current one). Only the registration lock's holder may write
/// through it, field by field.
pub fn find_column(rt: &Rt, _held: &RegGuard, tp: u64, limit: u32) -> Option<*mut ColumnHeader> {
    let hdr = rt.file_header()?;
    let base = rt.st.base();
    let pid = rt.st.pid();
    // Safety: aligned fields of the mapped header; n_columns is published with release.
    let (n, columns_offset, column_size) = unsafe {
        (
            AtomicU32::from_ptr(&raw mut (*hdr).n_columns).load(Ordering::Acquire),
            (*hdr).columns_offset,
            (*hdr).column_size,
        )
    };
    for i in (n.saturating_sub(limit)..n).rev() {
        let c = (base + (columns_offset + i as u64 * column_size) as usize) as *mut ColumnHeader;
        // Safety: columns below n_columns are published and mapped; read by value.
        if unsafe { (*c).owner_tp == tp && (*c).pid == pid } {
            return Some(c);
        }
    }
    None
}

/// If GS already points at this thread's own column, refresh its key word, run a safe
/// point and say so.
fn refresh_if_owner(rt: &Rt, tp: u64, tid: u32, pid: u32) -> bool {
    let Some(cur) = gs_column(rt) else { return false };
    // Safety: `cur` is a column in our mapping (a fork child resets GS before unmapping);
    // read by value.
    let (owner_tp, owner_tid, owner_pid) = unsafe { ((*cur).owner_tp, (*cur).tid, (*cur).pid) };
    if owner_tp != tp || owner_tid != tid || owner_pid != pid {
        return false;
    }
    // Safety: this thread's own column (owner, tid and pid match), written only by it.
    let mut col = unsafe { file_column(rt, cur) };
    col.h.owner_key = key(rt, tp);
    col.h.exit_key = col.h.owner_key;
    arm_calls_path(rt, cur);
    // Our own column and no frame half written: a safe point (`stint ctl` may have changed
    // the key to bring us here).
    control::safe_point(rt, &mut col);
    true
}

/// Thread `tid` gets no column (the table is full and cannot grow, or the file system is):
/// count it once in the header's `lost_threads`, and let its later events skip registration.
fn lose(rt: &Rt, held: &RegGuard, hdr: *mut stint_layout::FileHeader, tid: u32) {
    if rt.st.mark_lost(held, tid) {
        // Safety: aligned u64 in the mapping (its blocks were allocated at creation).
        unsafe { AtomicU64::from_ptr(&raw mut (*hdr).lost_threads) }.fetch_add(1, Ordering::Relaxed);
    }
}

/// The slow path of a point (see the module documentation): register the calling thread,
/// or notice a fork. True if the event should be counted in the column GS now points at.
pub fn slow(rt: &Rt, point: u32) -> bool {
    let st = rt.st;
    if !st.active() {
        // Measuring nothing: the calls-only entries stop asking (the idle word).
        // Safety: the cookie's page is mapped for the whole run, and `idle_addr` is an
        // aligned word of it that only this store writes.
        unsafe { core::ptr::write_volatile(stint_layout::idle_addr(rt.cfg.control_region() as u64) as *mut u64, 1) };
        return false;
    }
    let pid = sys::getpid();
    let known = st.pid();
    if pid != known {
        // A fork child: one thread leaves the parent's file and makes the child's; any other
        // thread skips its event meanwhile (pid 0: under way).
        if !st.claim_fork(known) {
            return false;
        }
        // Safety: the hand-off is ours alone (claim_fork), and start-up is long over.
        let su = unsafe { st.startup() };
        // On a stack of its own: the thread that forked may have a small one (issue 14).
        process::on_own_stack(|| profile_file::fork_child(rt, su, FLAG_FORK_CHILD));
        if !st.active() {
            return false;
        }
    }
    let tp = sys::thread_pointer();
    if tp == 0 {
        // A static program before its libc set up TLS: the FS base is start-up's dummy page
        // (`start::install_dummy_tls`). No thread yet: measure nothing.
        return false;
    }
    let tid = sys::gettid();
    if refresh_if_owner(rt, tp, tid, pid) {
        return true;
    }
    // Lost once, lost for good: no lock, no growth attempt per event.
    if st.is_lost(tid) {
        return false;
    }
    let Some(hdr) = rt.file_header() else { return false };
    // Timers, but none of CPU time: the TSC alone (a program without timers keeps the
    // system-call clock it never reads on a hot path).
    let wall_only = rt.cfg.flags & (CFG_NO_TIMERS | CFG_NO_CPU_CLOCK) == CFG_NO_CPU_CLOCK;
    let page = match rt.cfg.flags & (CFG_NO_TIMERS | CFG_NO_CPU_CLOCK) {
        0 => clock::CpuPage::open(&st.rseq, tp),
        _ => clock::CpuPage::none(), // nothing needs the CPU clock's fast path
    };
    let Some(mut guard) = rt.lock_registration(tid) else {
        // Safety: aligned u64 in the mapping.
        unsafe { AtomicU64::from_ptr(&raw mut (*hdr).skipped_reentrant) }.fetch_add(1, Ordering::Relaxed);
        return false;
    };
    // A signal handler may have registered this thread between our check and the lock.
    if refresh_if_owner(rt, tp, tid, pid) {
        return true;
    }
    // Safety: fields of the mapped header that only the lock holder writes.
    let (idx, cap) = unsafe { ((*hdr).n_columns, (*hdr).capacity_columns) };
    // Safety: we hold the registration lock.
    if idx >= cap && !unsafe { profile_file::grow(rt, hdr) } {
        lose(rt, &guard, hdr, tid);
        return false;
    }
    // Safety: as above (grow may have changed nothing we read here but the capacity).
    let (columns_offset, column_size) = unsafe { ((*hdr).columns_offset, (*hdr).column_size) };
    // The blocks of what the column's thread writes without asking rt-lib, before anything
    // writes it: a full file system loses the thread (counted), never raises SIGBUS in the
    // program. That is the header with the first page of the shadow stack (the entry routine
    // asks rt-lib for more at `shadow_ready`), the counters, and the first slots of the tree's
    // index when this thread keeps call paths (it grows with the tree, and the nodes get
    // blocks a page at a time: timer.rs). The lock tables, the ring and the baseline get
    // theirs at their first write (column.rs), so a thread's blocks follow what it does
    // (issue 14).
    let geo = rt.cfg.geometry();
    let col_off = columns_offset + idx as u64 * column_size;
    let counters = (COUNTERS_OFFSET as u64, baseline_offset(geo.n_points, geo.n_slots));
    let index = cct_index_offset(geo.n_points, geo.n_slots);
    let index_len = if st.cct_mask() != 0 { (st.cct_mask().min(CCT_INITIAL_MASK) as u64 + 1) * 4 } else { 0 };
    let eager = [(0, PAGE), (counters.0, counters.1 - counters.0), (index, index_len)];
    let fits = |&(off, len): &(u64, u64)| off + len <= column_size;
    if !eager.iter().all(fits)
        || eager.iter().filter(|r| r.1 != 0).any(|&(off, len)| sys::allocate(st.fd(), col_off + off, len).is_err())
    {
        lose(rt, &guard, hdr, tid);
        return false;
    }
    let col_addr = st.base() + (columns_offset + idx as u64 * column_size) as usize;
    // Safety: column `idx` lies inside the mapped file (capacity checked above) and no other
    // thread touches an unpublished column.
    let col = unsafe { Column::from_raw(col_addr as *mut ColumnHeader, rt.cfg.geometry()) };
    let h = &mut *col.h;
    h.shadow_ready = SHADOW_FIRST_PAGE;
    h.self_addr = col_addr as u64;
    h.owner_tp = tp;
    h.owner_key = key(rt, tp);
    h.tid = tid;
    h.index = idx;
    h.pid = pid;
    h.first_point = point;
    h.registered_monotonic_ns = sys::clock_ns(sys::CLOCK_MONOTONIC);
    if wall_only {
        clock::setup_wall_only(h);
    } else {
        clock::setup(h, st.tsc_hz(), page, &st.rseq);
    }
    // The thread record: running since now, named by its comm (or a name given to it
    // before it got here; we hold the registration lock, which `pthread_setname_np`'s
    // wrapper takes).
    h.thread_state = STATE_RUN;
    h.state_object = u32::MAX;
    h.state_since = sys::rdtsc();
    h.last_tsc = h.state_since;
    sys::thread_name(&mut h.name);
    take_pending_name(&mut guard, tp, &mut h.name);
    take_pending_start(rt, tp, h);
    control::on_register(rt, h);
    arm_calls_path(rt, h);
    if tid == pid && rt.cfg.tid_offset != 0 && h.owner_key == tid {
        // The main thread's tid word is where the rewriter said: start-up checks it, but a
        // static program had no TLS then (its dummy page holds 0), so check it here too.
        // Safety: an aligned u32 of the mapped header.
        unsafe { AtomicU32::from_ptr(&raw mut (*hdr).flags) }.fetch_or(FLAG_TID_KEY_VERIFIED, Ordering::Relaxed);
    }
    h.cct_mask = h.cct_mask.min(CCT_INITIAL_MASK);
    // Safety: aligned u32 fields; release publishes the column's contents.
    unsafe {
        AtomicU32::from_ptr(&raw mut h.state).store(COLUMN_LIVE, Ordering::Release);
        AtomicU32::from_ptr(&raw mut (*hdr).n_columns).store(idx + 1, Ordering::Release);
    }
    // Safety: the column is mapped for the rest of the run (the file only grows).
    let ok = unsafe { sys::set_gs_base(col_addr) }.is_ok();
    drop(guard);
    ok
}

// ---- The start-routine and name hand-off from the wrappers ----

/// A free hand-off slot for a thread about to be created by `creator_tid`, filled with its
/// start routine, argument and config; its address is the argument of the start shim.
pub fn claim_start(rt: &Rt, creator_tid: u32, start: u64, arg: u64) -> Option<usize> {
    let p =
        rt.st.pending.iter().find(|p| p.used.compare_exchange(0, 1, Ordering::Acquire, Ordering::Relaxed).is_ok())?;
    p.creator_tid.store(creator_tid, Ordering::Relaxed);
    p.start.store(start, Ordering::Relaxed);
    p.arg.store(arg, Ordering::Relaxed);
    p.config.store(rt.cfg.addr(), Ordering::Relaxed);
    p.tp.store(0, Ordering::Relaxed);
    Some(p as *const _ as usize)
}

/// Give back a slot `pthread_create` did not use.
pub fn release_start(slot: usize) {
    // Safety: `slot` came from `claim_start`: a slot of a live RtState.
    let p = unsafe { &*(slot as *const crate::state::PendingStart) };
    p.used.store(0, Ordering::Release);
}

/// What a new thread finds in its hand-off slot: (start routine, argument, config block).
/// Marks the slot with the thread's pointer, for its registration.
///
/// # Safety
/// `slot` came from `claim_start` and was passed to this thread by `pthread_create`.
pub unsafe fn start_from_slot(slot: usize, tp: u64) -> (u64, u64, u64) {
    // Safety: per the contract.
    let p = unsafe { &*(slot as *const crate::state::PendingStart) };
    let r = (p.start.load(Ordering::Relaxed), p.arg.load(Ordering::Relaxed), p.config.load(Ordering::Relaxed));
    p.tp.store(tp, Ordering::Release);
    r
}

/// The thread of `slot` ended: give the slot back if its registration never took it.
///
/// # Safety
/// As [`start_from_slot`].
pub unsafe fn end_slot(slot: usize, tp: u64) {
    // Safety: per the contract.
    let p = unsafe { &*(slot as *const crate::state::PendingStart) };
    if p.tp.compare_exchange(tp, 0, Ordering::AcqRel, Ordering::Relaxed).is_ok() {
        // Never registered (ran no instrumented code).
        p.used.store(0, Ordering::Release);
    }
}

/// Registration of thread `tp` (or the start shim of a thread that registered before it
/// reached the shim: in a static program the libc's own thread start-up is instrumented):
/// the creator and start routine its slot holds, if any, into `col`, the thread's own.
pub fn take_pending_start(rt: &Rt, tp: u64, col: &mut ColumnHeader) {
    if tp == 0 {
        return;
    }
    for p in rt.st.pending.iter() {
        if p.used.load(Ordering::Acquire) == 1 && p.tp.load(Ordering::Acquire) == tp {
            col.creator_tid = p.creator_tid.load(Ordering::Relaxed);
            col.start_routine = p.start.load(Ordering::Relaxed).wrapping_sub(rt.cfg.bias());
            p.tp.store(0, Ordering::Relaxed);
            p.used.store(0, Ordering::Release);
            return;
        }
    }
}

/// Keep `name` for thread `tp`, which has not registered yet.
pub fn remember_name(guard: &mut RegGuard, tp: u64, name: [u8; 16]) {
    let names = guard.names();
    let slot = names.iter().position(|p| p.tp == tp || p.tp == 0).unwrap_or(0);
    if let Some(p) = names.get_mut(slot) {
        p.tp = tp;
        p.name = name;
    }
}

/// Registration: a name given to this thread before it registered.
fn take_pending_name(guard: &mut RegGuard, tp: u64, name: &mut [u8; 16]) {
    if let Some(p) = guard.names().iter_mut().find(|p| p.tp == tp && tp != 0) {
        *name = p.name;
        p.tp = 0;
    }
}

/// Record the calling thread's `/proc/thread-self/schedstat` on its column (time on a CPU and
/// time waiting on a run queue, ns) as it ends: one open, read and close per thread, so a
/// reader splits its RUN time into on-CPU, waiting for a CPU and off-CPU (issue 12). Left
/// unset (`sched_read` 0) when /proc cannot be read.
pub fn record_schedstat(col: &mut ColumnHeader) {
    let Ok(fd) = sys::open(b"/proc/thread-self/schedstat\0", sys::O_RDONLY | sys::O_CLOEXEC, 0) else {
        return;
    };
    let mut buf = [0u8; 96];
    let n = sys::read(fd as i32, &mut buf).unwrap_or(0);
    sys::close(fd as i32);
    if let Some((cpu, runq)) = parse_schedstat(buf.get(..n).unwrap_or(&[])) {
        col.sched_cpu_ns = cpu;
        col.sched_runq_ns = runq;
        col.sched_read = 1;
    }
}

/// The first two fields of a schedstat line (`cpu_ns runq_ns slices`).
fn parse_schedstat(b: &[u8]) -> Option<(u64, u64)> {
    let mut fields = b.split(|&c| c == b' ' || c == b'\n').filter(|f| !f.is_empty());
    let mut num = || -> Option<u64> {
        let f = fields.next()?;
        f.iter()
            .try_fold(0u64, |v, &c| c.is_ascii_digit().then(|| v.saturating_mul(10).saturating_add((c - b'0') as u64)))
    };
    Some((num()?, num()?))
}

#[cfg(test)]
mod schedstat_tests {
    #[test]
    fn parses_the_first_two_fields() {
        assert_eq!(super::parse_schedstat(b"123456 789 42\n"), Some((123456, 789)));
        assert_eq!(super::parse_schedstat(b"12x 3 4\n"), None);
        assert_eq!(super::parse_schedstat(b"5\n"), None);
    }
}
