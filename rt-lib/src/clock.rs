//! The clocks (D11): TSC calibration, and each thread's virtual CPU timer.
//!
//! A thread's CPU clock is `rdtsc − cpu_off`, valid while the sequence word at `seq_ptr`
//! (the `lock` word of the thread's perf task-clock page, which the kernel moves at every
//! sched-in) is unchanged and less than `sync_ticks` passed since the last
//! synchronisation; otherwise it is re-synchronised with `CLOCK_THREAD_CPUTIME_ID`. Where
//! perf is refused, `seq_ptr` points at `seq_never`, which never matches, so every timer
//! event takes the system call. Everything here works on the calling thread's own column
//! header.
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

/// Give a new column its CPU clock: a perf task-clock page whose `lock` word moves at every
/// scheduling of the thread, or (perf refused) a sequence pointer that never matches.
pub fn setup(col: &mut ColumnHeader, tsc_hz: u64) {
    col.sync_ticks = tsc_hz / 1000 * SYNC_MS;
    match sys::perf_task_clock_page() {
        Ok(page) if tsc_hz != 0 => {
            col.seq_ptr = (page + sys::PERF_PAGE_LOCK_OFFSET) as u64;
            col.clock_source = CLOCK_SOURCE_PERF_TSC;
        }
        other => {
            if let Ok(page) = other {
                // Safety: the page was mapped just now and nothing refers to it.
                let _ = unsafe { sys::munmap(page, 4096) };
            }
            col.seq_never = 1;
            col.seq = 0;
            col.seq_ptr = &col.seq_never as *const u32 as u64;
            col.clock_source = CLOCK_SOURCE_SYSCALL;
        }
    }
    resync(col, tsc_hz);
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
/// scheduling period (the sequence word is unchanged across the read).
pub fn resync(col: &mut ColumnHeader, tsc_hz: u64) {
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
    fn ticks_convert_without_overflow() {
        assert_eq!(ns_to_ticks(1_000_000_000, 3_000_000_000), 3_000_000_000);
        assert_eq!(ns_to_ticks(u64::MAX / 2, 4_000_000_000), ((u64::MAX / 2) as u128 * 4) as u64);
        assert_eq!(ns_to_ticks(5, 0), 0);
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
