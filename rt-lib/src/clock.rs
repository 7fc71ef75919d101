//! The clocks (D11): TSC calibration, and each thread's virtual CPU timer.
//!
//! A thread's CPU clock is `rdtsc − cpu_off`, valid while the sequence word at `seq_ptr`
//! (the `lock` word of the thread's perf task-clock page, which the kernel moves at every
//! sched-in) is unchanged and less than `sync_ticks` passed since the last
//! synchronisation; otherwise it is re-synchronised. Where the page offers `cap_user_time`
//! (the kernel's sched_clock is the TSC: bare metal, most hosts) the re-synchronisation reads
//! the page (`time_enabled` at the last sched-in, extrapolated with the page's TSC-to-ns
//! conversion under the `lock` seqlock: no system call per context switch, issue 14);
//! otherwise (a KVM guest whose sched_clock is kvm-clock clears the bit) it reads
//! `CLOCK_THREAD_CPUTIME_ID`, one system call. Where perf is refused, `seq_ptr` points at
//! `seq_never`, which never matches, so every timer event takes the system call. Everything
//! here works on the calling thread's own column header.
//!
//! Layering: uses `sys` and `stint_layout` only.
#![allow(unsafe_code)]

use crate::sys;
use stint_layout::{ColumnHeader, CLOCK_SOURCE_NONE, CLOCK_SOURCE_PERF_TSC, CLOCK_SOURCE_SYSCALL};

/// Milliseconds of TSC extrapolation after which a timer event re-synchronises the CPU clock
/// although the thread was not scheduled out (`ColumnHeader::sync_ticks`): bounds the error
/// hypervisor steal time causes to what it steals in this window, at one system call per
/// window at most.
const SYNC_MS: u64 = 1;

/// The calling thread's perf task-clock page, opened before the registration lock is taken:
/// `perf_event_open` can take milliseconds (the first event of a quiet system switches the
/// kernel's scheduler hooks on), and every other thread registering would spin on the lock
/// meanwhile (issue 14). Unmapped on drop unless [`setup`] took it.
pub struct CpuPage(Option<usize>);

impl CpuPage {
    pub fn open() -> CpuPage {
        CpuPage(sys::perf_task_clock_page().ok())
    }

    /// No page: the clock re-synchronises with the system call (a program without timers,
    /// `CFG_NO_TIMERS`, whose threads never read it on a hot path).
    pub fn none() -> CpuPage {
        CpuPage(None)
    }
}

impl Drop for CpuPage {
    fn drop(&mut self) {
        if let Some(page) = self.0.take() {
            // Safety: the page was mapped by `open` and nothing refers to it.
            let _ = unsafe { sys::munmap(page, 4096) };
        }
    }
}

/// Give a new column its CPU clock: the thread's perf task-clock page ([`CpuPage::open`]),
/// whose `lock` word moves at every scheduling of the thread, or (perf refused) a sequence
/// pointer that never matches.
pub fn setup(col: &mut ColumnHeader, tsc_hz: u64, mut page: CpuPage) {
    col.sync_ticks = tsc_hz / 1000 * SYNC_MS;
    match page.0.take() {
        Some(page) if tsc_hz != 0 => {
            col.seq_ptr = (page + sys::PERF_PAGE_LOCK_OFFSET) as u64;
            col.clock_source = CLOCK_SOURCE_PERF_TSC;
        }
        other => {
            drop(CpuPage(other));
            col.seq_never = 1;
            col.seq = 0;
            col.seq_ptr = &col.seq_never as *const u32 as u64;
            col.clock_source = CLOCK_SOURCE_SYSCALL;
        }
    }
    resync_syscall(col, tsc_hz);
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

/// The sequence word the column's clock follows: the mapped perf page's lock word, or the
/// column's own `seq_never` (read as a field: it is part of the header we borrow).
pub fn read_seq(col: &ColumnHeader) -> u32 {
    let p = col.seq_ptr as *const u32;
    if core::ptr::eq(p, &col.seq_never) {
        return col.seq_never;
    }
    // Safety: `setup` pointed `seq_ptr` at the perf page it mapped read-only for the rest of
    // the thread's life; nothing else changes it (a fork child's columns are new).
    unsafe { core::ptr::read_volatile(p) }
}

/// Re-synchronise the thread's CPU clock: `cpu_off = TSC − CPU time in ticks`, read inside one
/// scheduling period (the sequence word is unchanged across the read): from the perf page
/// where it offers the conversion, else with the system call.
pub fn resync(col: &mut ColumnHeader, tsc_hz: u64) {
    if let Some(p) = page_clock(col).filter(|_| col.perf_base_ns != 0) {
        col.cpu_off = p.tsc.wrapping_sub(ns_to_ticks(p.ns.wrapping_add(col.perf_base_ns), tsc_hz));
        col.sync_tsc = p.tsc;
        col.seq = p.seq;
        col.resyncs = col.resyncs.wrapping_add(1);
        return;
    }
    resync_syscall(col, tsc_hz);
}

/// [`resync`] with `CLOCK_THREAD_CPUTIME_ID`.
fn resync_syscall(col: &mut ColumnHeader, tsc_hz: u64) {
    let mut tries = 0;
    loop {
        let s = read_seq(col);
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
pub fn cpu_ticks_now(col: &mut ColumnHeader, tsc_hz: u64) -> u64 {
    if col.clock_source == CLOCK_SOURCE_NONE {
        return 0;
    }
    if read_seq(col) != col.seq || sys::rdtsc().wrapping_sub(col.sync_tsc) > col.sync_ticks {
        resync(col, tsc_hz);
    }
    sys::rdtsc().wrapping_sub(col.cpu_off)
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
    } else if let Some(hz) = CpuPage::open().0.and_then(page_hz) {
        return (hz, TscSource::PerfPage);
    }
    (calibrate_tsc(), TscSource::Calibrated)
}

/// The frequency in the perf page at `page` where it offers `cap_user_time`.
fn page_hz(page: usize) -> Option<u64> {
    // Safety: `page` is a perf page mapped read-only by `CpuPage::open` (unmapped when the
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
        resync(&mut col, hz);
        assert_eq!((col.seq, col.resyncs), (6, 1));
        let cpu = cpu_ticks_now(&mut col, hz);
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

    #[test]
    fn a_column_without_perf_resyncs_every_time() {
        let mut col = ColumnHeader { clock_source: CLOCK_SOURCE_SYSCALL, seq_never: 1, ..Default::default() };
        col.seq_ptr = &col.seq_never as *const u32 as u64;
        let hz = 1_000_000_000;
        resync(&mut col, hz);
        let before = col.resyncs;
        let _ = cpu_ticks_now(&mut col, hz);
        assert_eq!(col.resyncs, before + 1, "seq_never never matches seq");
        assert_eq!(cpu_ticks_now(&mut ColumnHeader::default(), hz), 0, "no clock yet");
    }
}
