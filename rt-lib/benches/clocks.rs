//! The machine's floor under the runtime's clocks (issue 14): what one `rdtsc` costs (a timed
//! call reads it twice), and one `clock_gettime(CLOCK_THREAD_CPUTIME_ID)` (a system call: the
//! CPU clock's re-synchronisation where the perf page offers no `cap_user_time`). The
//! whole-program figures are `tests/bench/perf.py`'s.

fn main() {
    divan::main();
}

/// One TSC read, as the trampolines and `sys::rdtsc` do it.
#[divan::bench]
fn rdtsc() -> u64 {
    // Safety: rdtsc only reads the counter.
    unsafe { core::arch::x86_64::_rdtsc() }
}

/// The thread's CPU time from the kernel: the slow path of the CPU clock.
#[divan::bench]
fn clock_thread_cputime() -> libc::timespec {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // Safety: a valid clock id and a pointer to a timespec we own.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts
}

/// CLOCK_MONOTONIC through the vDSO, for comparison (no system call).
#[divan::bench]
fn clock_monotonic() -> libc::timespec {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // Safety: as above.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts
}
