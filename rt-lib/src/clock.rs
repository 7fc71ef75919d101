//! The clocks (D11): TSC calibration, and each thread's virtual CPU timer.
//!
//! A thread's CPU clock is `rdtsc − cpu_off`, valid while the sequence word at `seq_ptr` is
//! unchanged (it changes whenever the thread was scheduled out) and less than `sync_ticks`
//! passed since the last synchronisation; otherwise it is re-synchronised. The word is one of:
//! - **the perf page** (`perf-task-clock+tsc`): the `lock` word of the thread's perf
//!   task-clock page, which the kernel moves at every sched-in. Where the page offers
//!   `cap_user_time` (the kernel's sched_clock is the TSC: bare metal, most hosts) the
//!   re-synchronisation reads the page (`time_enabled` at the last sched-in, extrapolated
//!   with the page's TSC-to-ns conversion under the `lock` seqlock: no system call per
//!   context switch, issue 14);
//! - **the rseq area** (`rseq+tsc`), where the page would not offer `cap_user_time` (a KVM
//!   guest whose sched_clock is kvm-clock clears it): the low half of the thread's
//!   `rseq->rseq_cs`. A re-synchronisation arms it with the address of an empty
//!   critical-section descriptor ([`RseqState`]: version 0, `post_commit_offset` 0, the
//!   signature word before `abort_ip`) and reads `CLOCK_THREAD_CPUTIME_ID`. The kernel
//!   (kernel/rseq.c, 4.18 to 6.18) marks a thread at every context switch (`rseq_preempt`
//!   in `prepare_task_switch`, voluntary or not), migration and signal delivery; at its
//!   return to user space (`__rseq_handle_notify_resume` → `rseq_ip_fixup`) it reads the
//!   descriptor and, the instruction pointer being outside its empty range, writes 0 to
//!   `rseq_cs`. A system call or a timer tick that switches nothing leaves it alone.
//!   Measured on this project's 6.18 KVM guest: cleared after `nanosleep` (even of 0 ns), a
//!   2 ms futex wait, a blocking pipe read and a signal to itself; of 300 busy spans of 3 ms
//!   at load 5, the 154 switched out (`getrusage`) were exactly the 154 cleared; not
//!   cleared by 2,000 `getppid` calls nor by a `sched_yield` with nothing else to run. The
//!   kernel reads the 4 bytes before `abort_ip` at every clear and sends SIGSEGV unless they
//!   are the area's signature (x86's `RSEQ_SIG`, glibc's and librseq's): the descriptor
//!   carries it. This avoids the perf event, whose update at every switch cost +35.7 % CPU
//!   on the mutex workload (docs/PERFORMANCE.md); a re-synchronisation is still one system
//!   call.
//!
//!   Whose area: glibc ≥ 2.35 registers one per thread near the thread pointer, found once
//!   per process by asking the kernel (an `rseq` call naming exactly the registered area
//!   answers EBUSY, any other address EINVAL, and reads no memory). Where none is registered
//!   (musl, `GLIBC_TUNABLES=glibc.pthread.rseq=0`) the runtime registers one of its own in a
//!   private mapping (never the profile file: a truncated file would make the kernel's
//!   writes fault); a program that registers rseq itself after its first instrumented event
//!   then finds it taken. The program's own critical sections (librseq, tcmalloc) keep
//!   working: a section stores its descriptor in `rseq_cs` as it starts and contains no
//!   calls, so no trampoline (and no re-arming) runs inside one, and a signal handler runs
//!   only after the kernel aborted the section; its descriptor left in `rseq_cs` afterwards
//!   reads as a switch (one extra re-synchronisation). Decided per process at the first
//!   registration, with a self-test (armed, a `nanosleep`, cleared?); kept by fork children,
//!   which inherit the registrations;
//! - **`seq_never`** (`clock_gettime`): perf refused and no rseq; it never matches, so every
//!   timer event takes the system call.
//! - **`seq` itself** (`wall-only`): the process measures no CPU time (`CFG_NO_CPU_CLOCK`:
//!   no `cpu_time` in the spec, no sampling); it always matches and the extrapolation window
//!   never ends, so no timer event re-synchronises and no detector is opened.
//!
//! Everything here works on the calling thread's own column header.
//!
//! Layering: uses `sys` and `stint_layout` only.
#![allow(unsafe_code)]

use crate::sys;
use core::sync::atomic::{AtomicI64, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use stint_layout::{
    ColumnHeader, CLOCK_SOURCE_NONE, CLOCK_SOURCE_PERF_TSC, CLOCK_SOURCE_RSEQ, CLOCK_SOURCE_SYSCALL,
    CLOCK_SOURCE_WALL_ONLY,
};

/// Milliseconds of TSC extrapolation after which a timer event re-synchronises the CPU clock
/// although the thread was not scheduled out (`ColumnHeader::sync_ticks`): bounds the error
/// hypervisor steal time causes to what it steals in this window, at one system call per
/// window at most.
const SYNC_MS: u64 = 1;

/// The calling thread's switch detector: its rseq area or its perf task-clock page, chosen
/// before the registration lock is taken: `perf_event_open` can take milliseconds (the first
/// event of a quiet system switches the kernel's scheduler hooks on), and every other thread
/// registering would spin on the lock meanwhile (issue 14). A page is unmapped on drop
/// unless [`setup`] took it.
pub struct CpuPage {
    page: Option<usize>,
    /// The thread's registered rseq area and the descriptor address to arm it with.
    rseq: Option<(usize, u64)>,
}

impl CpuPage {
    /// The detector for the calling thread (thread pointer `tp`): the rseq area where this
    /// process chose it ([`RseqState`]; the first thread to get here chooses), else a perf
    /// page.
    pub fn open(rs: &RseqState, tp: u64) -> CpuPage {
        match rs.mode.load(Ordering::Acquire) {
            MODE_RSEQ => {
                if let Some(area) = rs.thread_area(tp) {
                    return CpuPage { page: None, rseq: Some((area, rs.desc_addr())) };
                }
            }
            MODE_UNDECIDED
                if rs
                    .mode
                    .compare_exchange(MODE_UNDECIDED, MODE_DECIDING, Ordering::AcqRel, Ordering::Acquire)
                    .is_ok() =>
            {
                return rs.decide(tp);
            }
            _ => {}
        }
        CpuPage::perf()
    }

    /// A perf page only (the detector before rseq; also what [`tsc_frequency`] reads).
    fn perf() -> CpuPage {
        CpuPage { page: sys::perf_task_clock_page().ok(), rseq: None }
    }

    /// No page: the clock re-synchronises with the system call (a program without timers,
    /// `CFG_NO_TIMERS`, whose threads never read it on a hot path).
    pub fn none() -> CpuPage {
        CpuPage { page: None, rseq: None }
    }
}

impl Drop for CpuPage {
    fn drop(&mut self) {
        if let Some(page) = self.page.take() {
            // Safety: the page was mapped by `perf` and nothing refers to it.
            let _ = unsafe { sys::munmap(page, 4096) };
        }
    }
}

/// x86-64's rseq signature (`RSEQ_SIG` of glibc and librseq): the word the kernel wants
/// before a descriptor's `abort_ip`, and the one the runtime registers its own areas with.
pub const RSEQ_SIG: u32 = 0x5305_3053;
/// `sizeof(struct rseq)` of the original ABI (every kernel since 4.18 accepts it).
const RSEQ_LEN: u32 = 32;
/// Offset of the `rseq_cs` field in `struct rseq` (after `cpu_id_start` and `cpu_id`).
const RSEQ_CS_FIELD: usize = 8;
/// A 32-byte-aligned address no thread can register (above user space): `rseq` naming it
/// answers EINVAL when an area is registered already (another address) and EFAULT when none
/// is, and registers nothing.
const KERNEL_ADDR: usize = 0xffff_ffff_ffff_ffe0;
const EFAULT: sys::Errno = sys::Errno(14);
/// How far on either side of the thread pointer the libc's area is looked for (glibc
/// 2.35–2.39 keep it in `struct pthread`: 0x920 bytes above the thread pointer for 2.36;
/// later ones in the static TLS block below it).
const AREA_WINDOW: i64 = 4096;
/// Threads of a process that can get an area of the runtime's own (a `MAP_NORESERVE`
/// private mapping of 2 MiB made at the first; slots are never reused).
const OWN_AREAS: usize = 1 << 16;

const MODE_UNDECIDED: u32 = 0;
const MODE_DECIDING: u32 = 1;
const MODE_PERF: u32 = 2;
const MODE_RSEQ: u32 = 3;
const AREA_UNKNOWN: u32 = 0;
const AREA_FOUND: u32 = 1;
const AREA_NONE: u32 = 2;

/// What the process knows about rseq, in the runtime's zero-filled state (private memory
/// that fork children keep): the empty critical-section descriptor every thread arms its
/// area with, whether the process uses rseq or the perf page, where the libc's areas are,
/// and the runtime's own areas.
#[repr(C, align(32))]
#[derive(Default)]
pub struct RseqState {
    /// `struct rseq_cs`: version and flags 0, `start_ip` = `&sig[0]`, `post_commit_offset` 0
    /// (an empty section: no instruction pointer is ever inside it), `abort_ip` = `&sig[2]`.
    desc: [AtomicU64; 4],
    /// `sig[1]` = [`RSEQ_SIG`], the word before `abort_ip` the kernel checks at every clear.
    sig: [AtomicU32; 4],
    /// `MODE_*`: undecided, being decided by one thread, the perf page, the rseq area.
    mode: AtomicU32,
    /// `AREA_*`: whether the libc's per-thread area was looked for, and found.
    libc: AtomicU32,
    /// The libc area's offset from the thread pointer (with `AREA_FOUND`).
    libc_off: AtomicI64,
    /// The runtime's own areas (0: not mapped yet), and how many were handed out.
    pool: AtomicUsize,
    next: AtomicUsize,
}

impl RseqState {
    fn desc_addr(&self) -> u64 {
        self.desc.as_ptr() as u64
    }

    /// Fill the descriptor (before any thread arms it; the same values every time).
    fn init_desc(&self) {
        let sig = self.sig.as_ptr() as u64;
        self.sig[1].store(RSEQ_SIG, Ordering::Relaxed);
        self.desc[0].store(0, Ordering::Relaxed);
        self.desc[1].store(sig, Ordering::Relaxed);
        self.desc[2].store(0, Ordering::Relaxed);
        self.desc[3].store(sig + 8, Ordering::Release);
    }

    /// The first registering thread's choice for the process: the perf page where it offers
    /// `cap_user_time` (no system call per switch); else the rseq area, if the thread has one
    /// and the self-test passes; else the page.
    fn decide(&self, tp: u64) -> CpuPage {
        let mut perf = CpuPage::perf();
        let user_time = perf.page.is_some_and(|p| page_caps(p) & CAP_USER_TIME != 0);
        let mut chosen = None;
        // A descriptor whose low half is 0 would read as "cleared" (the state is 64-byte
        // aligned in the program's pages and the descriptor at an offset inside it).
        if !user_time && self.desc_addr() as u32 != 0 {
            self.init_desc();
            chosen = self.thread_area(tp).filter(|&area| self_test(area, self.desc_addr()));
        }
        self.mode.store(if chosen.is_some() { MODE_RSEQ } else { MODE_PERF }, Ordering::Release);
        match chosen {
            Some(area) => CpuPage { page: perf.page.take(), rseq: Some((area, self.desc_addr())) },
            None => CpuPage { page: perf.page.take(), rseq: None },
        }
    }

    /// The calling thread's registered rseq area: the libc's (at the offset found once per
    /// process), else one of the runtime's own, registered now; `None` without rseq, or when
    /// an area is registered that cannot be found (the thread keeps the perf page).
    fn thread_area(&self, tp: u64) -> Option<usize> {
        let at = |off: i64| tp.wrapping_add(off as u64) as usize;
        if self.libc.load(Ordering::Acquire) == AREA_FOUND {
            let area = at(self.libc_off.load(Ordering::Relaxed));
            if probe(area) == Err(sys::Errno::EBUSY) {
                return Some(area);
            }
        }
        match probe(KERNEL_ADDR) {
            Err(sys::Errno::EINVAL) => {} // an area is registered: find it below
            Err(EFAULT) => return self.own_area(),
            _ => return None, // ENOSYS: no rseq
        }
        if self.libc.load(Ordering::Acquire) == AREA_UNKNOWN {
            // Probing addresses the thread does not own is safe now: with an area registered
            // the kernel only compares them with it.
            let offsets = (0..AREA_WINDOW / 32).map(|i| i * 32).chain((1..=AREA_WINDOW / 32).map(|i| -i * 32));
            let mut found = None;
            for off in offsets {
                match probe(at(off)) {
                    Err(sys::Errno::EBUSY) => found = Some(off),
                    Err(sys::Errno::EPERM) => {} // that area, registered with another signature
                    _ => continue,
                }
                break;
            }
            if let Some(off) = found {
                self.libc_off.store(off, Ordering::Relaxed);
                self.libc.store(AREA_FOUND, Ordering::Release);
                return Some(at(off));
            }
            self.libc.store(AREA_NONE, Ordering::Release);
        }
        // A fork child's thread inherits its parent thread's registration: one of our own.
        let pool = self.pool.load(Ordering::Acquire);
        let n = self.next.load(Ordering::Relaxed).min(OWN_AREAS);
        if pool == 0 {
            return None;
        }
        (0..n).map(|i| pool + i * RSEQ_LEN as usize).find(|&a| probe(a) == Err(sys::Errno::EBUSY))
    }

    /// The `rseq_cs` field a re-synchronisation of the calling thread may arm, given the
    /// column's `seq_ptr`: only this thread's libc area's field (thread pointer + the offset
    /// found) or a field of one of the runtime's own areas (a private mapping). The column
    /// lies in the profile file, which anyone who can write the file may change: a pointer
    /// from there is never written through unchecked.
    fn armable(&self, seq_ptr: u64) -> Option<usize> {
        let p = seq_ptr as usize;
        if self.libc.load(Ordering::Acquire) == AREA_FOUND {
            let area = sys::thread_pointer().wrapping_add(self.libc_off.load(Ordering::Relaxed) as u64) as usize;
            if p == area.wrapping_add(RSEQ_CS_FIELD) {
                return Some(p);
            }
        }
        let pool = self.pool.load(Ordering::Acquire);
        let len = RSEQ_LEN as usize;
        let n = self.next.load(Ordering::Relaxed).min(OWN_AREAS);
        let inside = p.checked_sub(pool).filter(|&d| pool != 0 && d < n * len && d % len == RSEQ_CS_FIELD);
        inside.map(|_| p)
    }

    /// Register an area of the runtime's own for the calling thread (which has none).
    fn own_area(&self) -> Option<usize> {
        let mut pool = self.pool.load(Ordering::Acquire);
        if pool == 0 {
            let len = OWN_AREAS * RSEQ_LEN as usize;
            let flags = sys::MAP_PRIVATE | sys::MAP_ANONYMOUS | sys::MAP_NORESERVE;
            // Safety: not MAP_FIXED: the kernel picks a free range, nothing existing changes.
            let new = unsafe { sys::mmap(0, len, sys::PROT_READ | sys::PROT_WRITE, flags, -1, 0) }.ok()?;
            match self.pool.compare_exchange(0, new, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => pool = new,
                Err(theirs) => {
                    // Safety: our own mapping, which nothing else has seen.
                    let _ = unsafe { sys::munmap(new, len) };
                    pool = theirs;
                }
            }
        }
        let i = self.next.fetch_add(1, Ordering::Relaxed);
        if i >= OWN_AREAS {
            return None;
        }
        let area = pool + i * RSEQ_LEN as usize;
        // Safety: slot `i` is this thread's alone for the rest of the process (slots are
        // never handed out twice): 32 writable, 32-byte-aligned bytes of a private mapping
        // that is never unmapped.
        unsafe { sys::rseq_register(area, RSEQ_LEN, RSEQ_SIG) }.ok().map(|_| area)
    }
}

/// `rseq` naming `area`, for a thread that has an area registered (EBUSY: that one; EINVAL:
/// another; EPERM: that one, with another signature) or, with [`KERNEL_ADDR`], to learn
/// whether it has one (EFAULT: none).
fn probe(area: usize) -> Result<usize, sys::Errno> {
    // Safety: only called with KERNEL_ADDR (never registered: the kernel refuses it) or
    // after the kernel said an area is registered, when it compares addresses and registers
    // nothing.
    unsafe { sys::rseq_register(area, RSEQ_LEN, RSEQ_SIG) }
}

/// Does a context switch clear the armed `rseq_cs` of `area` on this kernel? One blocking
/// `nanosleep` (a voluntary switch, the kind a kernel could treat differently from a
/// preemption; ≈ 60–100 µs of wall time with the default timer slack, no CPU).
fn self_test(area: usize, desc: u64) -> bool {
    let cs = (area + RSEQ_CS_FIELD) as *mut u64;
    // Safety: `area` is the calling thread's registered rseq area (32 bytes, 32-aligned):
    // its `rseq_cs` field is the thread's to write, and `desc` is a valid descriptor.
    unsafe { core::ptr::write_volatile(cs, desc) };
    let _ = sys::nanosleep(0);
    // Safety: as above. (A descriptor left armed after a failed test is a valid one.)
    unsafe { core::ptr::read_volatile(cs) == 0 }
}

/// The perf page's `capabilities` word.
fn page_caps(page: usize) -> u64 {
    // Safety: `page` is a perf page mapped read-only by `CpuPage::perf`, alive while this runs.
    unsafe { core::ptr::read_volatile((page + PAGE_CAPS) as *const u64) }
}

/// Give a new column its CPU clock: the thread's rseq area or perf task-clock page
/// ([`CpuPage::open`]), which tell whether the thread was scheduled out, or (neither) a
/// sequence pointer that never matches.
pub fn setup(col: &mut ColumnHeader, tsc_hz: u64, mut page: CpuPage, rs: &RseqState) {
    col.sync_ticks = tsc_hz / 1000 * SYNC_MS;
    let rseq = page.rseq.take();
    match (rseq, page.page.take()) {
        (Some((area, desc)), other) if tsc_hz != 0 => {
            drop(CpuPage { page: other, rseq: None });
            col.seq_ptr = (area + RSEQ_CS_FIELD) as u64;
            col.rseq_cs = desc;
            col.seq = desc as u32;
            col.clock_source = CLOCK_SOURCE_RSEQ;
        }
        (_, Some(page)) if tsc_hz != 0 => {
            col.seq_ptr = (page + sys::PERF_PAGE_LOCK_OFFSET) as u64;
            col.clock_source = CLOCK_SOURCE_PERF_TSC;
        }
        (_, other) => {
            drop(CpuPage { page: other, rseq: None });
            col.seq_never = 1;
            col.seq = 0;
            col.seq_ptr = &col.seq_never as *const u32 as u64;
            col.clock_source = CLOCK_SOURCE_SYSCALL;
        }
    }
    resync_syscall(col, tsc_hz, rs);
    if col.clock_source == CLOCK_SOURCE_PERF_TSC {
        // The page's task clock starts at 0 when the event is opened; the thread's CPU clock
        // counts from its start. The difference, read with the page on both sides of the
        // system call (the bracket's half width, some hundred ns, is the error of this
        // constant; every measurement is a difference of two clock reads, which it cancels).
        // 0 (no page clock at setup) keeps every later re-synchronisation on the system call,
        // so one thread's clock never mixes the two origins.
        if let Some(a) = page_clock(col) {
            let s = sys::clock_ns(sys::CLOCK_THREAD_CPUTIME_ID);
            if let Some(b) = page_clock(col) {
                let mid = a.ns.wrapping_add(b.ns.wrapping_sub(a.ns) / 2);
                col.perf_base_ns = s.wrapping_sub(mid).max(1);
            }
        }
    }
}

/// Give a new column of a process that measures no CPU time (`CFG_NO_CPU_CLOCK`) its timers'
/// clock: the TSC alone. `seq_ptr` points at the column's own `seq`, which nothing changes
/// (the timed path's "scheduled since?" compare always holds), and the extrapolation window
/// never ends, so a timer event never takes the slow path for the clock: no switch detector
/// opened, no `CLOCK_THREAD_CPUTIME_ID` call, ever. Frames still carry a "CPU" stamp (the
/// TSC), which no exit adds anywhere: no point has the `cpu_time` bit.
pub fn setup_wall_only(col: &mut ColumnHeader) {
    col.seq = 0;
    col.seq_ptr = &col.seq as *const u32 as u64;
    col.sync_ticks = u64::MAX >> 1;
    col.cpu_off = 0;
    col.sync_tsc = sys::rdtsc();
    col.clock_source = CLOCK_SOURCE_WALL_ONLY;
}

/// Byte offsets in `struct perf_event_mmap_page` (include/uapi/linux/perf_event.h).
const PAGE_LOCK: usize = 8;
const PAGE_TIME_ENABLED: usize = 24;
const PAGE_CAPS: usize = 40;
const PAGE_TIME_SHIFT: usize = 50;
const PAGE_TIME_MULT: usize = 52;
const PAGE_TIME_OFFSET: usize = 56;
const PAGE_TIME_CYCLES: usize = 80;
const PAGE_TIME_MASK: usize = 88;
/// `capabilities` bits: the page's time fields convert the TSC (`cap_user_time`), and the
/// counter they take is `time_cycles + (tsc − time_cycles) & time_mask` (`cap_user_time_short`).
const CAP_USER_TIME: u64 = 1 << 3;
const CAP_USER_TIME_SHORT: u64 = 1 << 5;

/// One consistent read of the perf page: the task clock now (ns), the `lock` word it was read
/// under, and the TSC it was extrapolated to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct PageClock {
    ns: u64,
    seq: u32,
    tsc: u64,
}

/// The thread's task clock from its perf page, without a system call: `time_enabled` (the
/// kernel writes it at every sched-in; a per-thread software event is enabled exactly while
/// the thread runs) plus the ns since that write, from the TSC with the page's `time_mult`,
/// `time_shift` and `time_offset` (the kernel's self-monitoring formula). `None` when the
/// column has no page, the page does not offer `cap_user_time`, or no read was consistent.
fn page_clock(col: &ColumnHeader) -> Option<PageClock> {
    if col.clock_source != CLOCK_SOURCE_PERF_TSC {
        return None;
    }
    let page = (col.seq_ptr as usize).wrapping_sub(PAGE_LOCK);
    // Safety: for a PERF_TSC column `seq_ptr` is the lock word of the page `setup` mapped
    // read-only for the thread's life (or, in unit tests, of a page-sized buffer); every
    // offset read lies inside its first 96 bytes, naturally aligned.
    let rd32 = |off: usize| unsafe { core::ptr::read_volatile((page + off) as *const u32) };
    let rd64 = |off: usize| unsafe { core::ptr::read_volatile((page + off) as *const u64) };
    for _ in 0..8 {
        let seq = rd32(PAGE_LOCK);
        core::sync::atomic::compiler_fence(core::sync::atomic::Ordering::SeqCst);
        let caps = rd64(PAGE_CAPS);
        if caps & CAP_USER_TIME == 0 {
            return None;
        }
        let enabled = rd64(PAGE_TIME_ENABLED);
        // Safety: as above (a u16 at an even offset).
        let shift = unsafe { core::ptr::read_volatile((page + PAGE_TIME_SHIFT) as *const u16) } as u32;
        let mult = rd32(PAGE_TIME_MULT) as u64;
        let offset = rd64(PAGE_TIME_OFFSET);
        let (cycles, mask) = (rd64(PAGE_TIME_CYCLES), rd64(PAGE_TIME_MASK));
        let tsc = sys::rdtsc();
        core::sync::atomic::compiler_fence(core::sync::atomic::Ordering::SeqCst);
        if rd32(PAGE_LOCK) != seq {
            continue;
        }
        let ns = enabled.wrapping_add(tsc_to_page_ns(tsc, caps, shift, mult, offset, cycles, mask)?);
        return Some(PageClock { ns, seq, tsc });
    }
    None
}

/// ns since the page was written, for the TSC value `tsc` (the kernel's documented
/// conversion: `time_offset + (cyc >> shift) * mult + ((cyc & (2^shift − 1)) * mult >> shift)`).
/// `None` for a shift the formula cannot take.
fn tsc_to_page_ns(tsc: u64, caps: u64, shift: u32, mult: u64, offset: u64, cycles: u64, mask: u64) -> Option<u64> {
    if shift >= 32 {
        return None;
    }
    let cyc = if caps & CAP_USER_TIME_SHORT != 0 { cycles.wrapping_add(tsc.wrapping_sub(cycles) & mask) } else { tsc };
    let quot = cyc >> shift;
    let rem = cyc & ((1u64 << shift) - 1);
    Some(offset.wrapping_add(quot.wrapping_mul(mult)).wrapping_add((rem * mult) >> shift))
}

/// The sequence word the column's clock follows: the mapped perf page's lock word, the low
/// half of the rseq area's `rseq_cs`, or the column's own `seq_never` (read as a field: it is part of the header we borrow).
pub fn read_seq(col: &ColumnHeader) -> u32 {
    let p = col.seq_ptr as *const u32;
    if core::ptr::eq(p, &col.seq_never) {
        return col.seq_never;
    }
    if core::ptr::eq(p, &col.seq) {
        return col.seq; // a wall-only column (`setup_wall_only`)
    }
    // Safety: `setup` pointed `seq_ptr` at the perf page it mapped read-only for the rest of
    // the thread's life, or at the thread's registered rseq area (registered for its life,
    // in memory never unmapped); a fork child's columns are new.
    unsafe { core::ptr::read_volatile(p) }
}

/// Re-synchronise the thread's CPU clock: `cpu_off = TSC − CPU time in ticks`, read inside one
/// scheduling period (the sequence word is unchanged across the read): from the perf page
/// where it offers the conversion, else with the system call.
pub fn resync(col: &mut ColumnHeader, tsc_hz: u64, rs: &RseqState) {
    if col.clock_source == CLOCK_SOURCE_WALL_ONLY {
        // No CPU clock to read (never reached from a timer event: `seq` always matches).
        col.sync_tsc = sys::rdtsc();
        return;
    }
    if let Some(p) = page_clock(col).filter(|_| col.perf_base_ns != 0) {
        col.cpu_off = p.tsc.wrapping_sub(ns_to_ticks(p.ns.wrapping_add(col.perf_base_ns), tsc_hz));
        col.sync_tsc = p.tsc;
        col.seq = p.seq;
        col.resyncs = col.resyncs.wrapping_add(1);
        return;
    }
    resync_syscall(col, tsc_hz, rs);
}

/// [`resync`] with `CLOCK_THREAD_CPUTIME_ID`. With the rseq area the descriptor is armed
/// first and must still be there after the reads (a switch in between cleared it); `seq`
/// stays the descriptor's low half, so after four disturbed tries the next event
/// re-synchronises again.
fn resync_syscall(col: &mut ColumnHeader, tsc_hz: u64, rs: &RseqState) {
    let rseq = col.clock_source == CLOCK_SOURCE_RSEQ;
    // Checked against the process's own record, never taken from the file as it is.
    let arm = if rseq { rs.armable(col.seq_ptr) } else { None };
    let mut tries = 0;
    loop {
        if let Some(cs) = arm {
            // Safety: `armable` found `cs` to be the `rseq_cs` field (an 8-aligned u64) of the
            // calling thread's libc area or of one of the runtime's own areas, which only
            // their threads and the kernel write; the value is the process's valid empty
            // descriptor, from private memory.
            unsafe { core::ptr::write_volatile(cs as *mut u64, rs.desc_addr()) };
        }
        let s = if rseq { col.seq } else { read_seq(col) };
        let ns = sys::clock_ns(sys::CLOCK_THREAD_CPUTIME_ID);
        let t = sys::rdtsc();
        tries += 1;
        if read_seq(col) == s || tries >= 4 {
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
pub fn cpu_ticks_now(col: &mut ColumnHeader, tsc_hz: u64, rs: &RseqState) -> u64 {
    if col.clock_source == CLOCK_SOURCE_NONE {
        return 0;
    }
    // The TSC first, then the check: a switch after the read is seen (a needless
    // re-synchronisation at worst), where a switch between a check and a later read would
    // put its time slice in the thread's CPU time. The emitted timed path reads in the same
    // order. After a re-synchronisation, its own reading (checked the same way) is the time.
    let t = sys::rdtsc();
    if read_seq(col) != col.seq || t.wrapping_sub(col.sync_tsc) > col.sync_ticks {
        resync(col, tsc_hz, rs);
        return col.sync_tsc.wrapping_sub(col.cpu_off);
    }
    t.wrapping_sub(col.cpu_off)
}

fn ns_to_ticks(ns: u64, tsc_hz: u64) -> u64 {
    (ns as u128 * tsc_hz as u128 / 1_000_000_000) as u64
}

/// How [`tsc_frequency`] found the TSC's frequency.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TscSource {
    /// CPUID leaf 0x15: the crystal clock times the TSC/crystal ratio (Intel).
    CpuidCrystal,
    /// The hypervisor's timing leaf 0x40000010 (TSC kHz; VMware, QEMU with
    /// `vmware-cpuid-freq`).
    HypervisorLeaf,
    /// The perf page's TSC-to-ns conversion (`time_mult`/`time_shift`), which the kernel fills
    /// where its sched_clock is the TSC (`cap_user_time`; bare metal, most hosts).
    PerfPage,
    /// Measured against CLOCK_MONOTONIC ([`calibrate_tsc`]).
    Calibrated,
}

/// The frequencies believed: a machine-given figure outside 100 MHz–20 GHz is not.
fn plausible(hz: u64) -> Option<u64> {
    (100_000_000..=20_000_000_000).contains(&hz).then_some(hz)
}

/// TSC Hz from CPUID leaf 0x15 (`eax` denominator, `ebx` numerator, `ecx` crystal Hz; a
/// zero means not enumerated).
fn hz_from_crystal(eax: u32, ebx: u32, ecx: u32) -> Option<u64> {
    if eax == 0 || ebx == 0 || ecx == 0 {
        return None;
    }
    plausible(ecx as u64 * ebx as u64 / eax as u64)
}

/// TSC Hz from the hypervisor timing leaf's `eax` (kHz).
fn hz_from_hypervisor_khz(eax: u32) -> Option<u64> {
    plausible(eax as u64 * 1000)
}

/// TSC Hz from the perf page's conversion: ns = ticks × `mult` / 2^`shift`.
fn hz_from_page(mult: u32, shift: u16) -> Option<u64> {
    if mult == 0 || shift >= 64 {
        return None;
    }
    plausible(((1_000_000_000u128 << shift) / mult as u128).min(u64::MAX as u128) as u64)
}

fn cpuid(leaf: u32) -> [u32; 4] {
    // Safety: CPUID exists on every x86-64 processor; an unknown leaf returns data, not a fault.
    #[allow(unused_unsafe)]
    let r = unsafe { core::arch::x86_64::__cpuid_count(leaf, 0) };
    [r.eax, r.ebx, r.ecx, r.edx]
}

/// The TSC frequency from what the machine says, without waiting: CPUID leaf 0x15, the
/// hypervisor's timing leaf, or (not under a hypervisor, where the page rarely has it and
/// opening it costs a perf event) the perf page; else measured ([`calibrate_tsc`], about a
/// millisecond of clock reads). Exactness: the leaves and the page give the figure the
/// kernel converts the TSC with (to 1 kHz, 0.4 ppm at 2.6 GHz, or better); the measurement
/// is within the clock reads' jitter over 1 ms. CPU times do not depend on it beyond the
/// ticks extrapolated between two re-synchronisations (D11).
pub fn tsc_frequency() -> (u64, TscSource) {
    let max = cpuid(0)[0];
    if max >= 0x15 {
        let [a, b, c, _] = cpuid(0x15);
        if let Some(hz) = hz_from_crystal(a, b, c) {
            return (hz, TscSource::CpuidCrystal);
        }
    }
    let hypervisor = max >= 1 && cpuid(1)[2] & (1 << 31) != 0;
    if hypervisor {
        if cpuid(0x4000_0000)[0] >= 0x4000_0010 {
            if let Some(hz) = hz_from_hypervisor_khz(cpuid(0x4000_0010)[0]) {
                return (hz, TscSource::HypervisorLeaf);
            }
        }
    } else if let Some(hz) = CpuPage::perf().page.and_then(page_hz) {
        return (hz, TscSource::PerfPage);
    }
    (calibrate_tsc(), TscSource::Calibrated)
}

/// The frequency in the perf page at `page` where it offers `cap_user_time`.
fn page_hz(page: usize) -> Option<u64> {
    // Safety: `page` is a perf page mapped read-only by `CpuPage::perf` (unmapped when the
    // `CpuPage` that owns it drops, after this returns); offsets inside its first 64 bytes.
    let (caps, mult, shift) = unsafe {
        (
            core::ptr::read_volatile((page + PAGE_CAPS) as *const u64),
            core::ptr::read_volatile((page + PAGE_TIME_MULT) as *const u32),
            core::ptr::read_volatile((page + PAGE_TIME_SHIFT) as *const u16),
        )
    };
    if caps & CAP_USER_TIME == 0 {
        return None;
    }
    hz_from_page(mult, shift)
}

/// TSC ticks per second, measured against CLOCK_MONOTONIC over about a millisecond (the
/// system-call jitter of a few hundred nanoseconds gives well under 0.1 % error).
pub fn calibrate_tsc() -> u64 {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn machine_given_frequencies_convert_exactly() {
        // Intel's leaf 0x15: 24 MHz crystal × 2600/24 = 2.6 GHz; nothing enumerated: none.
        assert_eq!(hz_from_crystal(24, 2600, 24_000_000), Some(2_600_000_000));
        assert_eq!(hz_from_crystal(0, 0, 0), None);
        assert_eq!(hz_from_crystal(2, 100, 0), None, "no crystal frequency");
        // The hypervisor leaf's kHz (this guest's kernel detected 2596.140 MHz).
        assert_eq!(hz_from_hypervisor_khz(2_596_140), Some(2_596_140_000));
        assert_eq!(hz_from_hypervisor_khz(0), None);
        // A page with 1 ns per 2.5 ticks: mult/2^shift = 0.4.
        assert_eq!(hz_from_page(409_600, 20), Some(2_560_000_000));
        assert_eq!(hz_from_page(0, 10), None);
        assert_eq!(hz_from_page(1, 40), None, "implausible: 10^9 × 2^40 Hz");
    }

    #[test]
    fn this_machine_has_a_frequency() {
        let (hz, source) = tsc_frequency();
        assert!(plausible(hz).is_some(), "{hz} Hz from {source:?}");
        let measured = calibrate_tsc();
        let diff = hz.abs_diff(measured) as f64 / measured as f64;
        assert!(diff < 0.001, "{source:?} says {hz} Hz, measured {measured} Hz");
    }

    #[test]
    fn ticks_convert_without_overflow() {
        assert_eq!(ns_to_ticks(1_000_000_000, 3_000_000_000), 3_000_000_000);
        assert_eq!(ns_to_ticks(u64::MAX / 2, 4_000_000_000), ((u64::MAX / 2) as u128 * 4) as u64);
        assert_eq!(ns_to_ticks(5, 0), 0);
    }

    /// A perf page in memory (8-byte aligned, the size the reads need), as the kernel writes it.
    struct FakePage([u64; 16]);
    impl FakePage {
        fn new(lock: u32, caps: u64, enabled: u64, shift: u16, mult: u32, offset: u64) -> FakePage {
            let mut p = FakePage([0; 16]);
            p.0[PAGE_LOCK / 8] = lock as u64; // bytes 8..12, little-endian
            p.0[PAGE_TIME_ENABLED / 8] = enabled;
            p.0[PAGE_CAPS / 8] = caps;
            p.0[48 / 8] = (shift as u64) << 16 | (mult as u64) << 32;
            p.0[PAGE_TIME_OFFSET / 8] = offset;
            p
        }
        fn column(&self, base_ns: u64) -> ColumnHeader {
            ColumnHeader {
                clock_source: CLOCK_SOURCE_PERF_TSC,
                seq_ptr: self.0.as_ptr() as u64 + PAGE_LOCK as u64,
                perf_base_ns: base_ns,
                sync_ticks: 1 << 40,
                ..Default::default()
            }
        }
    }

    #[test]
    fn the_page_formula_converts_ticks_to_ns() {
        // mult/2^shift = 0.5 ns per tick; 2^shift − 1 low bits go through the remainder term.
        assert_eq!(tsc_to_page_ns(2_000_000, CAP_USER_TIME, 10, 512, 0, 0, 0), Some(1_000_000));
        assert_eq!(tsc_to_page_ns(2_000_001, CAP_USER_TIME, 10, 512, 7, 0, 0), Some(1_000_007));
        assert_eq!(tsc_to_page_ns(1023, CAP_USER_TIME, 10, 1024, 0, 0, 0), Some(1023));
        // time_offset is "−now": ns since the page was written.
        assert_eq!(tsc_to_page_ns(5_000, CAP_USER_TIME, 0, 1, 3_000u64.wrapping_neg(), 0, 0), Some(2_000));
        // cap_user_time_short: the counter is time_cycles + (tsc − time_cycles) & time_mask.
        let short = CAP_USER_TIME | CAP_USER_TIME_SHORT;
        assert_eq!(tsc_to_page_ns(0x1_0000_0010, short, 0, 1, 0, 0x10, 0xffff_ffff), Some(0x10));
        assert_eq!(tsc_to_page_ns(1, CAP_USER_TIME, 40, 1, 0, 0, 0), None, "shift too large");
    }

    #[test]
    fn a_page_with_user_time_resyncs_without_the_system_call() {
        let hz = 1_000_000_000; // 1 tick = 1 ns, so the page's 1:1 conversion is the TSC's
        let now = sys::rdtsc();
        let page = FakePage::new(6, CAP_USER_TIME, 7_000_000, 0, 1, now.wrapping_neg());
        let mut col = page.column(500_000);
        resync(&mut col, hz, &RseqState::default());
        assert_eq!((col.seq, col.resyncs), (6, 1));
        let cpu = cpu_ticks_now(&mut col, hz, &RseqState::default());
        // 7 ms at the sched-in + 0.5 ms before the event + the ticks since `now`.
        let since = sys::rdtsc().wrapping_sub(now);
        assert!((7_500_000..=7_500_000 + since).contains(&cpu), "{cpu} not in 7.5 ms + {since}");
        assert_eq!(col.resyncs, 1, "the lock word did not move: no re-synchronisation");
    }

    #[test]
    fn a_page_without_user_time_is_not_read() {
        let page = FakePage::new(6, 0, 7_000_000, 0, 1, 0);
        assert_eq!(page_clock(&page.column(1)), None);
        let page = FakePage::new(6, CAP_USER_TIME, 7_000_000, 0, 1, 0);
        assert!(page_clock(&page.column(1)).is_some());
        let mut col = page.column(1);
        col.clock_source = CLOCK_SOURCE_SYSCALL;
        assert_eq!(page_clock(&col), None, "a column without a page");
    }

    extern "C" {
        /// glibc ≥ 2.35: where its rseq area is, from the thread pointer, and how large it is
        /// (0: not registered, e.g. `glibc.pthread.rseq=0`).
        static __rseq_offset: isize;
        static __rseq_size: u32;
    }

    /// A state that lives as long as the process, as the runtime's does: a test thread's
    /// area may stay armed with its descriptor after the test, and the kernel reads the
    /// descriptor (and kills the process if its signature is gone) at the thread's next
    /// switch. A state freed at the end of the test was the SIGSEGV of CI's unit tests.
    fn process_state() -> &'static RseqState {
        Box::leak(Box::default())
    }

    #[test]
    fn the_descriptor_is_a_valid_empty_section() {
        let rs = process_state();
        rs.init_desc();
        let d: Vec<u64> = rs.desc.iter().map(|w| w.load(Ordering::Relaxed)).collect();
        assert_eq!(rs.desc_addr() % 32, 0, "struct rseq_cs is 32-byte aligned");
        assert_eq!(d[0], 0, "version 0, flags 0");
        assert_eq!(d[2], 0, "post_commit_offset 0: no instruction pointer is inside");
        // The kernel refuses (SIGSEGV) an abort_ip inside [start_ip, start_ip + offset) and
        // one not preceded by the registered signature.
        assert!(d[3].wrapping_sub(d[1]) >= d[2]);
        // Safety: abort_ip − 4 is `sig[1]`, inside the boxed state.
        assert_eq!(unsafe { core::ptr::read_volatile((d[3] - 4) as *const u32) }, RSEQ_SIG);
        assert_ne!(rs.desc_addr() as u32, 0, "a low half of 0 would read as cleared");
    }

    #[test]
    fn glibc_s_area_is_found_by_asking_the_kernel() {
        let rs = process_state();
        rs.init_desc();
        let tp = sys::thread_pointer();
        let area = rs.thread_area(tp).expect("this thread has an rseq area");
        // Safety: glibc's exported variables, constant after start-up.
        let (off, size) = unsafe { (__rseq_offset, __rseq_size) };
        if size != 0 {
            assert_eq!(area as u64, tp.wrapping_add(off as u64), "glibc's area (offset {off})");
            assert_eq!(rs.libc.load(Ordering::Relaxed), AREA_FOUND);
            // Another thread finds it at the same offset with one probe.
            let other = std::thread::spawn(move || (sys::thread_pointer(), rs.thread_area(sys::thread_pointer())));
            let (tp2, area2) = other.join().unwrap();
            assert_eq!(area2, Some(tp2.wrapping_add(off as u64) as usize));
        }
    }

    #[test]
    fn a_sleep_clears_the_armed_area_and_the_clock_resyncs() {
        let rs = process_state();
        rs.init_desc();
        let area = rs.thread_area(sys::thread_pointer()).expect("this thread has an rseq area");
        assert!(self_test(area, rs.desc_addr()), "a nanosleep did not clear rseq_cs");
        let hz = tsc_frequency().0;
        let mut col = ColumnHeader {
            clock_source: CLOCK_SOURCE_RSEQ,
            seq_ptr: (area + RSEQ_CS_FIELD) as u64,
            rseq_cs: rs.desc_addr(),
            seq: rs.desc_addr() as u32,
            sync_ticks: 1 << 40,
            ..Default::default()
        };
        resync(&mut col, hz, rs);
        // With no switch the clock extrapolates (a loaded host may preempt a try or two).
        let quiet = (0..50).any(|_| {
            let before = col.resyncs;
            let _ = cpu_ticks_now(&mut col, hz, rs);
            before == col.resyncs
        });
        assert!(quiet, "every read re-synchronised: the armed word never stays");
        for _ in 0..3 {
            let before = col.resyncs;
            let _ = sys::nanosleep(0);
            let _ = cpu_ticks_now(&mut col, hz, rs);
            assert_eq!(col.resyncs, before + 1, "a sleep is a switch: one re-synchronisation");
        }
        // The clock is the thread's: within 100 µs of CLOCK_THREAD_CPUTIME_ID.
        let mine = ns_to_ticks(sys::clock_ns(sys::CLOCK_THREAD_CPUTIME_ID), hz);
        let clock = cpu_ticks_now(&mut col, hz, rs);
        assert!(clock.abs_diff(mine) < hz / 10_000, "clock {clock} ticks, the thread's {mine}");
        // A column written by someone else: its pointer and descriptor are not written
        // through (a forged `seq_ptr` at a word of ours stays as it is; the clock still
        // re-synchronises, with the system call, at every event).
        let mut word = 0x1234_u64;
        let mut forged = ColumnHeader { seq_ptr: &mut word as *mut u64 as u64, rseq_cs: 0xdead_beef, ..col };
        resync(&mut forged, hz, rs);
        let _ = cpu_ticks_now(&mut forged, hz, rs);
        // Safety: a local the test owns, read once.
        let after = unsafe { core::ptr::read_volatile(&word) };
        assert_eq!(after, 0x1234, "a forged seq_ptr was written through");
    }

    #[test]
    fn the_process_takes_rseq_where_the_page_has_no_user_time() {
        let rs = process_state();
        let user_time = CpuPage::perf().page.is_some_and(|p| page_caps(p) & CAP_USER_TIME != 0);
        let got = rs.decide(sys::thread_pointer());
        let want = if user_time { MODE_PERF } else { MODE_RSEQ };
        assert_eq!(rs.mode.load(Ordering::Relaxed), want, "cap_user_time {user_time}");
        assert_eq!(got.rseq.is_some(), !user_time);
    }

    #[test]
    fn a_wall_only_column_never_resyncs_even_after_a_sleep() {
        let mut col = ColumnHeader::default();
        setup_wall_only(&mut col);
        assert_eq!(col.clock_source, CLOCK_SOURCE_WALL_ONLY);
        assert_eq!(read_seq(&col), col.seq, "the word a wall-only column follows is its own seq");
        let hz = 1_000_000_000;
        for _ in 0..3 {
            let _ = sys::nanosleep(0);
            let a = sys::rdtsc();
            let t = cpu_ticks_now(&mut col, hz, &RseqState::default());
            let b = sys::rdtsc();
            assert!(a <= t && t <= b, "the clock is the TSC: {a} ≤ {t} ≤ {b}");
        }
        assert_eq!(col.resyncs, 0, "a switch is nothing to a wall-only column");
        // Called anyway: no system call, the window restarts.
        resync(&mut col, hz, &RseqState::default());
        assert_eq!((col.resyncs, col.cpu_off), (0, 0));
    }

    #[test]
    fn a_column_without_perf_resyncs_every_time() {
        let mut col = ColumnHeader { clock_source: CLOCK_SOURCE_SYSCALL, seq_never: 1, ..Default::default() };
        col.seq_ptr = &col.seq_never as *const u32 as u64;
        let hz = 1_000_000_000;
        resync(&mut col, hz, &RseqState::default());
        let before = col.resyncs;
        let _ = cpu_ticks_now(&mut col, hz, &RseqState::default());
        assert_eq!(col.resyncs, before + 1, "seq_never never matches seq");
        assert_eq!(cpu_ticks_now(&mut ColumnHeader::default(), hz, &RseqState::default()), 0, "no clock yet");
    }
}
