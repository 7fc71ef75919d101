//! The runtime's context: the read-only config block ([`Config`]), the writable state page
//! ([`RtState`]) and the two together ([`Rt`]), the one value every entry point builds and
//! passes down by reference. Also the thread-conscious lock ([`TcLock`], D7).
//!
//! # Why a context value
//! The image has no statics (build.rs rejects writable data), so everything is reached from
//! the config pointer the stub passes in. Obtaining the references is the unsafe step, done
//! once per entry in [`Rt::enter`] (or [`Config::from_raw`] for the trap handler, which needs
//! no state) under a `# Safety` contract; below that, code holds `&RtConfig` and `&RtState`.
//!
//! # What is shared, what is per-thread
//! `RtState` is shared by every thread of the process, so nothing hands out `&mut RtState`:
//! - shared and changing: `active`, `pid`, `base`, `mapped`, `fd`, `tsc_hz` are atomics
//!   (on x86-64 a relaxed or acquire load is the plain `mov` the code used before);
//! - the start-routine hand-off slots (`pending`) are atomics claimed with a CAS;
//! - the names given to unregistered threads (`names`) are guarded by the registration lock
//!   (`FileHeader::reg_lock`): only a [`RegGuard`] reaches them;
//! - the path template, the path scratch and the control-file path ([`Startup`]) are used
//!   only by single-threaded phases (start-up, and the one thread that handles a fork):
//!   [`RtState::startup`] is unsafe with that contract;
//! - the dummy column header is written once at start-up, before any thread's GS points
//!   at it, and only read afterwards.
//!
//! Per-thread data lives in the thread's column of the file (see `column`), never here.
//!
//! Layering: uses `sys`, `column` (for [`Geometry`]) and `stint_layout`.
#![allow(unsafe_code)]

use crate::column::Geometry;
use crate::sys;
use core::cell::UnsafeCell;
use core::mem::size_of;
use core::sync::atomic::{AtomicI32, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use stint_layout::{ColumnHeader, FileHeader, RtConfig, COLUMN_HEADER_RESERVED, PAGE, RT_STATE_SIZE};

/// A thread mask with every metric.
pub const ALL_METRICS: u32 = 0xff;

pub const TEMPLATE_MAX: usize = 1024;
pub const PATH_MAX: usize = 1536;
pub const CONTROL_PATH_MAX: usize = 512;
/// Longest `STINT_LOG` path kept (with its NUL).
pub const LOG_PATH_MAX: usize = 256;
pub const PENDING_CAP: usize = 64;
pub const NAMES_CAP: usize = 16;

/// The program's config block, as a reference (for its fields) and as the raw address the
/// stub passed in (for the regions its `*_rel` fields name: they lie outside the block, so
/// they are reached from the raw pointer, whose provenance covers them, never from the
/// reference, whose provenance covers the block only).
#[derive(Clone, Copy)]
pub struct Config<'a> {
    block: *const u8,
    cfg: &'a RtConfig,
}

impl core::ops::Deref for Config<'_> {
    type Target = RtConfig;
    fn deref(&self) -> &RtConfig {
        self.cfg
    }
}

impl<'a> Config<'a> {
    /// # Safety
    /// `block` is the rewriter-emitted `RtConfig` of this program (or a block built the same
    /// way by a test), mapped and unchanged for `'a`; the read-only regions its `*_rel` fields
    /// name (name, meta, gates, info, names, traps) hold what `RtConfig` documents, and the
    /// control region at `ctl_rel` holds `ctl_len` mapped bytes once start-up has run.
    pub unsafe fn from_raw(block: *const RtConfig) -> Config<'a> {
        // Safety: per the contract the block is valid and read-only for 'a.
        Config { block: block as *const u8, cfg: unsafe { &*block } }
    }

    /// The block's run-time address.
    pub fn addr(&self) -> u64 {
        self.block as u64
    }

    /// The address `rel` bytes from the block.
    pub fn at<T>(&self, rel: i64) -> *mut T {
        self.block.wrapping_offset(rel as isize) as *mut T
    }

    /// `len` read-only bytes the rewriter emitted at `rel`.
    fn bytes(&self, rel: i64, len: u64) -> &'a [u8] {
        // Safety: per `from_raw`, the region is the rewriter's, read-only for 'a.
        unsafe { core::slice::from_raw_parts(self.at::<u8>(rel), len as usize) }
    }

    /// The program's name as the rewriter recorded it.
    pub fn program_name(&self) -> &'a [u8] {
        self.bytes(self.name_rel, self.name_len)
    }

    /// The self-description (meta JSON).
    pub fn meta(&self) -> &'a [u8] {
        self.bytes(self.meta_rel, self.meta_len)
    }

    /// The initial gate bytes, one per point.
    pub fn initial_gates(&self) -> &'a [u8] {
        self.bytes(self.gates_rel, self.n_points as u64)
    }

    /// The capability bytes, one per point (`POINT_INFO_WRAP` | metric bits).
    pub fn point_info(&self) -> &'a [u8] {
        self.bytes(self.info_rel, self.n_points as u64)
    }

    /// The point names, NUL-terminated, in point order.
    pub fn point_names(&self) -> &'a [u8] {
        self.bytes(self.names_rel, self.names_len)
    }

    /// The control region inside the program (its first `n_points` bytes are the gates).
    pub fn control_region(&self) -> *mut u8 {
        self.at::<u8>(self.ctl_rel)
    }

    /// The live gate byte of `point` (0 for a point out of range).
    pub fn gate(&self, point: u32) -> u8 {
        if point >= self.n_points || point as u64 >= self.ctl_len {
            return 0;
        }
        // Safety: point < min(n_points, ctl_len): inside the control region, which is
        // mapped for the whole run (zero pages until start-up maps the profile's).
        unsafe { core::ptr::read_volatile(self.control_region().add(point as usize)) }
    }

    /// Run-time address minus link-time address.
    pub fn bias(&self) -> u64 {
        self.addr().wrapping_sub(self.link_addr)
    }

    /// The size of this program's columns.
    pub fn geometry(&self) -> Geometry {
        Geometry { n_points: self.n_points, n_slots: self.n_counter_slots }
    }
}

/// One runtime entry's context: the config block and the process's runtime state.
#[derive(Clone, Copy)]
pub struct Rt<'a> {
    pub cfg: Config<'a>,
    pub st: &'a RtState,
}

impl<'a> Rt<'a> {
    /// The context of one entry into the runtime.
    ///
    /// # Safety
    /// As [`Config::from_raw`], and `state_rel` names `RT_STATE_SIZE` writable bytes, 8-byte
    /// aligned, zero-filled at exec, that only the runtime uses (the rewriter reserves them
    /// in the program's RW segment), mapped for `'a`.
    pub unsafe fn enter(block: *const RtConfig) -> Rt<'a> {
        // Safety: forwarded contract.
        let cfg = unsafe { Config::from_raw(block) };
        // Safety: per the contract; `RtState` is valid when zero-filled (atomics, cells and
        // integers), and is only ever reached through shared references.
        let st = unsafe { &*cfg.at::<RtState>(cfg.state_rel) };
        Rt { cfg, st }
    }

    /// The mapped profile's header, if measuring.
    pub fn file_header(&self) -> Option<*mut FileHeader> {
        let base = self.st.base();
        (self.st.active() && base != 0).then_some(base as *mut FileHeader)
    }

    /// Take the registration lock (`FileHeader::reg_lock`) for thread `tid`. `None` when
    /// not measuring or when this thread holds it already (a signal handler interrupted the
    /// runtime: the caller skips its event).
    pub fn lock_registration(&self, tid: u32) -> Option<RegGuard<'a>> {
        let hdr = self.file_header()?;
        // Safety: an aligned u32 of the mapped header, which stays mapped while `active`
        // (only a fork child unmaps its parent's file, after clearing `active`).
        let lock = TcLock::new(unsafe { AtomicU32::from_ptr(&raw mut (*hdr).reg_lock) });
        match lock.acquire(tid) {
            TcAcquire::Yes => Some(RegGuard { lock, st: self.st }),
            TcAcquire::SelfHeld => None,
        }
    }
}

/// The registration lock, held; released on drop. Guards column allocation, the growth of
/// the file, the names of unregistered threads and writes to other threads' records.
pub struct RegGuard<'a> {
    lock: TcLock<'a>,
    st: &'a RtState,
}

impl RegGuard<'_> {
    /// Names given to threads that had not registered yet.
    pub fn names(&mut self) -> &mut [PendingName; NAMES_CAP] {
        // Safety: `names` is only reached through a guard, and `&mut self` makes this the
        // only reference while it lives.
        unsafe { &mut *self.st.names.get() }
    }
}

impl Drop for RegGuard<'_> {
    fn drop(&mut self) {
        self.lock.release();
    }
}

/// A start routine on its way from `pthread_create` to the new thread (see `threads`).
/// Claimed with a CAS on `used`; the other fields are written by the claimer before
/// `pthread_create` (which orders them before the new thread runs) and read by the new
/// thread's registration.
#[repr(C)]
pub struct PendingStart {
    /// 0 free, 1 taken.
    pub used: AtomicU32,
    pub creator_tid: AtomicU32,
    pub start: AtomicU64,
    pub arg: AtomicU64,
    pub config: AtomicU64,
    /// Thread pointer of the new thread once it runs; its registration takes the record.
    pub tp: AtomicU64,
}

/// A name given (pthread_setname_np) to a thread that had not registered yet.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct PendingName {
    pub tp: u64,
    pub name: [u8; 16],
}

/// What only single-threaded phases use: start-up, and the thread that handles a fork.
#[repr(C)]
pub struct Startup {
    /// FileHeader flags of this process's profile.
    pub flags: u32,
    /// The fs-relative tid word matched gettid() in the main thread.
    pub tid_key_ok: u32,
    pub template_len: u32,
    pub control_len: u32,
    /// 1 when the template is the default one, in the private per-user directory (D15):
    /// the directory is created and checked before the file is (profile_file::create).
    pub private_dir: u32,
    /// Length of the path of this process's profile in `path` once created (0: none).
    pub path_len: u32,
    /// Profile path template (`%p` → pid), copied at start so later changes to the
    /// environment strings cannot affect a fork child.
    pub template: [u8; TEMPLATE_MAX],
    /// Scratch for an expanded, NUL-terminated path.
    pub path: [u8; PATH_MAX],
    /// STINT_CONTROL, copied at start like the template (a fork child applies it again).
    pub control_path: [u8; CONTROL_PATH_MAX],
    /// The initial process stack (argc, argv, …): a fork child records the same arguments.
    pub initial_sp: u64,
    /// The process's start time (`FileHeader::proc_start_ticks`), read once at start.
    pub proc_start_ticks: u64,
    /// STINT_LOG, NUL-terminated (empty: diagnostics go to stderr).
    pub log_path: [u8; LOG_PATH_MAX],
    /// What an event costs (D21), measured at start; a fork child's profile keeps it (and
    /// calibrates again as it ends).
    pub calib: stint_layout::Calibration,
    /// TSC at which the start-up calibration began.
    pub calib_tsc: u64,
    /// 1 when start-up made the fork cookie's page private, anonymous and wipe-on-fork
    /// (`threads::init_cookie`); a fork child then writes a cookie of its own.
    pub cookie_ok: u32,
}

/// The runtime's writable state, in the rewriter-reserved zero-filled pages.
#[repr(C)]
pub struct RtState {
    /// GS target of a thread before it registers: its owner matches no thread. Written at
    /// start-up only, read by the trampolines through GS.
    dummy: UnsafeCell<ColumnHeader>,
    _dummy_pad: [u8; COLUMN_HEADER_RESERVED as usize - size_of::<ColumnHeader>()],
    /// 1 while a profile is mapped and events are recorded.
    active: AtomicU32,
    /// Process the mapping belongs to (a different getpid() means we are a fork child);
    /// 0 while a fork child sets up its own profile.
    pid: AtomicU32,
    fd: AtomicI32,
    /// `ColumnHeader::cct_mask` of every thread that registers (0: no call paths), set at
    /// start from the spec (`RtConfig::flags`) and `STINT_CALLTREE_NODES`.
    cct_mask: AtomicU32,
    /// TSC ticks per second (calibrated once at start, kept by fork children).
    tsc_hz: AtomicU64,
    /// Start of the reserved range holding the file mapping.
    base: AtomicUsize,
    /// Bytes of the file currently mapped at `base` (grown under the registration lock).
    mapped: AtomicUsize,
    /// Start routines handed from `pthread_create` to the new thread.
    pub pending: [PendingStart; PENDING_CAP],
    /// Guarded by the registration lock ([`RegGuard::names`]).
    names: UnsafeCell<[PendingName; NAMES_CAP]>,
    startup: UnsafeCell<Startup>,
    /// Bytes of address space reserved at `base` (the file grows up to it): 64 GiB, or less
    /// where `RLIMIT_AS` does not allow that much.
    reserve: AtomicUsize,
    /// A bitmap of the tids that could not get a column (0: none lost yet), mapped at the
    /// first loss: each lost thread is counted once, and its later events skip registration.
    lost: AtomicUsize,
    /// What the signal wrappers remember (`signals`).
    pub signals: SignalState,
    /// The program's `main`, which `__libc_start_main`'s thunk replaced by the runtime's main
    /// thunk (D22: `main`'s return value is the image's exit status); 0 before.
    pub main_fn: AtomicUsize,
    /// A timed call's calibrated cost (`Calibration::pair_ticks`, ticks × `CALIB_SCALE`),
    /// set at start: the timer's sampling decision compares a point's mean call with it
    /// (0: not calibrated, no point is sampled).
    sample_pair: AtomicU64,
    /// 1 once this process image's later calibration (D21, `start::calibrate_again`) has
    /// begun: it runs once, and never beside another run on the calibration's gate byte.
    /// A fork child starts from 0 only if its parent had not begun one.
    calib_again: AtomicU32,
    /// The test hook `STINT_TEST_SPOIL_CALIBRATION` (start.rs `CalibSpoil`), read at start.
    calib_spoil: AtomicU32,
    /// How the threads' CPU clocks detect context switches: the perf page or the rseq area,
    /// decided at the first registration (`clock::CpuPage::open`), kept by fork children.
    pub rseq: crate::clock::RseqState,
}

/// What the signal wrappers of a program with trap sites remember (`signals`): the SIGTRAP
/// action the program set, which signals' handler masks it asked to block SIGTRAP in, and
/// per thread whether it asked to block SIGTRAP. Atomics only: valid zero-filled (the
/// program's initial SIGTRAP action is SIG_DFL with no flags, as the kernel's).
#[repr(C)]
#[derive(Default)]
pub struct SignalState {
    /// Thread-conscious lock of the writers of `trap_act`.
    pub lock: AtomicU32,
    /// Sequence count of `trap_act` (odd while a writer changes it; read by the handler).
    pub seq: AtomicU32,
    /// The program's SIGTRAP action as the kernel would hold it: handler, flags, restorer,
    /// mask.
    pub trap_act: [AtomicU64; 4],
    /// Bit `sig - 1`: the program's `sa_mask` for `sig` included SIGTRAP.
    pub masks_with_trap: AtomicU64,
    /// Two bits per tid (asked, blocked), mapped at the first use (0: not yet).
    pub threads: AtomicUsize,
}

/// Bits of the lost-thread bitmap: the kernel's largest `pid_max` (PID_MAX_LIMIT on 64-bit);
/// only the pages of tids actually lost become resident.
const LOST_TIDS: usize = 1 << 22;

const _: () = assert!(size_of::<RtState>() as u64 <= RT_STATE_SIZE);

impl RtState {
    /// The dummy header's address (what GS holds before a thread registers).
    pub fn dummy_addr(&self) -> u64 {
        self.dummy.get() as u64
    }

    /// The dummy header, to initialise it.
    ///
    /// # Safety
    /// Start-up only (single-threaded, before any GS base points at it).
    #[allow(clippy::mut_from_ref)] // a cell, reached once by contract
    pub unsafe fn dummy_mut(&self) -> &mut ColumnHeader {
        // Safety: per the contract nothing else accesses it.
        unsafe { &mut *self.dummy.get() }
    }

    /// The single-threaded part of the state.
    ///
    /// # Safety
    /// Only start-up, or the one thread that handles a fork (see `threads::slow`), calls
    /// this, and the reference it gets is the only one to `Startup` while it lives.
    #[allow(clippy::mut_from_ref)] // a cell, reached by one thread by contract
    pub unsafe fn startup(&self) -> &mut Startup {
        // Safety: per the contract this is the only reference.
        unsafe { &mut *self.startup.get() }
    }

    pub fn active(&self) -> bool {
        self.active.load(Ordering::Acquire) != 0
    }

    pub fn set_active(&self, on: bool) {
        self.active.store(on as u32, Ordering::Release);
    }

    pub fn pid(&self) -> u32 {
        self.pid.load(Ordering::Acquire)
    }

    pub fn set_pid(&self, pid: u32) {
        self.pid.store(pid, Ordering::Release);
    }

    /// Claim the fork hand-off: true for exactly one thread that saw `old` and the new pid.
    pub fn claim_fork(&self, old: u32) -> bool {
        old != 0 && self.pid.compare_exchange(old, 0, Ordering::AcqRel, Ordering::Acquire).is_ok()
    }

    pub fn fd(&self) -> i32 {
        self.fd.load(Ordering::Relaxed)
    }

    pub fn set_fd(&self, fd: i32) {
        self.fd.store(fd, Ordering::Relaxed);
    }

    pub fn cct_mask(&self) -> u32 {
        self.cct_mask.load(Ordering::Relaxed)
    }

    pub fn set_cct_mask(&self, mask: u32) {
        self.cct_mask.store(mask, Ordering::Relaxed);
    }

    pub fn sample_pair(&self) -> u64 {
        self.sample_pair.load(Ordering::Relaxed)
    }

    pub fn set_sample_pair(&self, pair: u64) {
        self.sample_pair.store(pair, Ordering::Relaxed);
    }

    /// Claim the later calibration: true for the first caller of the process image only.
    pub fn claim_calib_again(&self) -> bool {
        self.calib_again.swap(1, Ordering::AcqRel) == 0
    }

    pub fn calib_spoil(&self) -> u32 {
        self.calib_spoil.load(Ordering::Relaxed)
    }

    pub fn set_calib_spoil(&self, v: u32) {
        self.calib_spoil.store(v, Ordering::Relaxed);
    }

    pub fn tsc_hz(&self) -> u64 {
        self.tsc_hz.load(Ordering::Relaxed)
    }

    pub fn set_tsc_hz(&self, hz: u64) {
        self.tsc_hz.store(hz, Ordering::Relaxed);
    }

    pub fn base(&self) -> usize {
        self.base.load(Ordering::Acquire)
    }

    pub fn set_base(&self, base: usize) {
        self.base.store(base, Ordering::Release);
    }

    pub fn mapped(&self) -> usize {
        self.mapped.load(Ordering::Relaxed)
    }

    pub fn set_mapped(&self, len: usize) {
        self.mapped.store(len, Ordering::Relaxed);
    }

    pub fn reserve(&self) -> usize {
        self.reserve.load(Ordering::Relaxed)
    }

    pub fn set_reserve(&self, len: usize) {
        self.reserve.store(len, Ordering::Relaxed);
    }

    /// The word of the lost-thread bitmap holding `tid`'s bit, and the bit.
    fn lost_word(&self, tid: u32) -> Option<(&AtomicU64, u64)> {
        let map = self.lost.load(Ordering::Acquire);
        let i = tid as usize % LOST_TIDS;
        // Safety: a mapping of LOST_TIDS bits, 8-byte aligned, kept until `forget_lost`,
        // which only the one thread of a fork child calls.
        (map != 0).then(|| (unsafe { AtomicU64::from_ptr((map as *mut u64).add(i / 64)) }, 1u64 << (i % 64)))
    }

    /// Thread `tid` could not get a column earlier (it stays unmeasured: columns are never
    /// freed, so nothing changes for it).
    pub fn is_lost(&self, tid: u32) -> bool {
        self.lost_word(tid).is_some_and(|(w, bit)| w.load(Ordering::Relaxed) & bit != 0)
    }

    /// Mark thread `tid` lost; true if it was not marked before (count it). Without memory
    /// for the bitmap, every call says true: events are counted, as before the bitmap.
    pub fn mark_lost(&self, _held: &RegGuard, tid: u32) -> bool {
        if self.lost.load(Ordering::Acquire) == 0 {
            let rw = sys::PROT_READ | sys::PROT_WRITE;
            let flags = sys::MAP_PRIVATE | sys::MAP_ANONYMOUS | sys::MAP_NORESERVE;
            // Safety: without MAP_FIXED the kernel picks free addresses.
            match unsafe { sys::mmap(0, LOST_TIDS / 8, rw, flags, -1, 0) } {
                Ok(addr) => self.lost.store(addr, Ordering::Release),
                Err(_) => return true,
            }
        }
        self.lost_word(tid).is_none_or(|(w, bit)| w.fetch_or(bit, Ordering::Relaxed) & bit == 0)
    }

    /// Forget every lost thread (a fork child: its threads are new ones).
    ///
    /// # Safety
    /// Only the single thread of a fork child, before it registers anything.
    pub unsafe fn forget_lost(&self) {
        let map = self.lost.swap(0, Ordering::AcqRel);
        if map != 0 {
            // Safety: the bitmap is no longer reachable through `lost`, and no other thread
            // exists to hold a reference into it.
            let _ = unsafe { sys::munmap(map, LOST_TIDS / 8) };
        }
    }
}

/// Outcome of taking a thread-conscious lock (D7, seeds/000 Table 1).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum TcAcquire {
    /// Acquired; release it.
    Yes,
    /// This thread already holds it: a signal handler interrupted the runtime.
    SelfHeld,
}

/// A lock that knows its holder: 0 or the holder's tid. The word is shared by every thread
/// (and lives in the profile file).
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

// ---- The fork cookie (`ColumnHeader::owner_tpx`, `threads::arm_calls_path`) ----

/// The fork cookie's word: the page before the control region.
pub fn cookie_word(rt: &Rt) -> *mut u64 {
    stint_layout::cookie_addr(rt.cfg.control_region() as u64) as *mut u64
}

/// Start-up: the cookie's page private and anonymous, zeroed in fork children, with an odd
/// word. Without it (a kernel before 4.14) the cookie stays 0 and every calls-only entry asks
/// the runtime, which counts exactly but slowly.
pub fn init_cookie(rt: &Rt, su: &mut Startup) {
    let addr = cookie_word(rt) as usize;
    let rw = sys::PROT_READ | sys::PROT_WRITE;
    let flags = sys::MAP_PRIVATE | sys::MAP_ANONYMOUS | sys::MAP_FIXED;
    // Safety: the page the rewriter reserved for the cookie (`cookie_addr`), which nothing
    // else uses; replacing it with a zero page changes nothing before the cookie is written.
    if unsafe { sys::mmap(addr, PAGE as usize, rw, flags, -1, 0) }.is_err()
        || sys::madvise(addr, PAGE as usize, sys::MADV_WIPEONFORK).is_err()
    {
        return;
    }
    su.cookie_ok = 1;
    renew_cookie(rt, su);
}

/// A fresh odd cookie, where start-up made the page wipe-on-fork (a fork child finds it
/// zeroed; the page stays wipe-on-fork for its own children).
pub fn renew_cookie(rt: &Rt, su: &Startup) {
    if su.cookie_ok == 0 {
        return;
    }
    let w = cookie_word(rt);
    // Safety: the cookie's page is mapped for the whole run (the rewriter reserved it); only
    // start-up and the thread that handles a fork write it.
    unsafe { core::ptr::write_volatile(w, (sys::rdtsc().rotate_left(29) ^ w as u64) | 1) };
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
    fn fork_hand_off_goes_to_one_thread() {
        // Safety: RtState is valid zero-filled.
        let st: Box<RtState> = unsafe { Box::new(core::mem::zeroed()) };
        st.set_pid(10);
        assert!(!st.claim_fork(9), "a stale pid does not win");
        assert!(st.claim_fork(10));
        assert!(!st.claim_fork(10), "only once");
        assert!(!st.claim_fork(0), "0 means a hand-off is under way");
        assert_eq!(st.pid(), 0);
    }

    #[test]
    fn dummy_header_is_first() {
        // The trampolines read the dummy through GS = its address: it must start the page.
        // Safety: RtState is valid zero-filled.
        let st: Box<RtState> = unsafe { Box::new(core::mem::zeroed()) };
        assert_eq!(st.dummy_addr(), &*st as *const RtState as u64);
    }
}
