// timing.h: what the timer test programs (timers.c, recurse.c, longjmp.c, sigstorm.c,
// unwind.cpp) share: the clocks they read themselves, a spin loop of fixed length, and the
// side file they write their own measurements to, so tests/timers.rs can compare a profile
// with clocks the rewriter never touched.
//
// Everything here is `always_inline`, at -O0 too: the helpers add no function of their own
// to the program, so they never appear in a profile and never change what a function's
// inclusive time covers.
//
// Side file: when the environment variable TIMES_FILE names a file, `times_write()` creates
// it and writes every line `times_add()` collected, in the order they were added (lines of
// different threads may interleave; each line is whole). Lines are
//     KEY TID CPU_NS WALL_NS      (times_add)
//     KEY N                       (times_count)
// with TID the kernel thread id (gettid), CPU_NS from CLOCK_THREAD_CPUTIME_ID and WALL_NS
// from CLOCK_MONOTONIC. Nothing is written without TIMES_FILE; stdout and stderr never
// carry a measurement, so they stay deterministic.
#ifndef STINT_TIMING_H
#define STINT_TIMING_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define TIMING_INLINE static inline __attribute__((always_inline))

TIMING_INLINE long clock_ns(clockid_t c) {
    struct timespec ts;
    clock_gettime(c, &ts);
    return ts.tv_sec * 1000000000L + ts.tv_nsec;
}

/* CPU time of the calling thread, ns. */
TIMING_INLINE long cpu_now(void) {
    return clock_ns(CLOCK_THREAD_CPUTIME_ID);
}

/* CLOCK_MONOTONIC, ns. */
TIMING_INLINE long wall_now(void) {
    return clock_ns(CLOCK_MONOTONIC);
}

/* CLOCK_MONOTONIC, ns, by the system call itself (inline `syscall`, no libc call): not an
   event of the rewritten program. Read just before the first event above frames left
   without a ret, it bounds from below the time at which those frames are closed: the libc
   call of wall_now() is such an event, and its trampoline (which may make the CPU clock's
   system call, where a loaded machine switches threads) runs before wall_now() reads. */
TIMING_INLINE long wall_now_raw(void) {
    struct timespec ts;
    long ret;
    __asm__ volatile("syscall"
                     : "=a"(ret)
                     : "a"((long)SYS_clock_gettime), "D"((long)CLOCK_MONOTONIC), "S"(&ts)
                     : "rcx", "r11", "memory");
    (void)ret;
    return ts.tv_sec * 1000000000L + ts.tv_nsec;
}

TIMING_INLINE long thread_id(void) {
    return syscall(SYS_gettid);
}

/* n rounds of a linear congruential step: CPU work of fixed length whose result depends
   only on its input (the empty asm keeps the compiler from folding the loop). */
TIMING_INLINE unsigned long spin(unsigned long x, long n) {
    for (long i = 0; i < n; i++) {
        x = x * 6364136223846793005UL + 1442695040888963407UL;
        __asm__ volatile("" : "+r"(x));
    }
    return x;
}

/* A measurement around a call: span_start() just before it, span_since() just after.
   The CPU clock is a system call, a point where the kernel likes to switch threads, so it
   is read outside the wall-clock reads: a thread switch there never counts as wall time of
   the call. Only the vDSO's CLOCK_MONOTONIC read lies between the call and the wall
   reads. */
struct span {
    long cpu, wall;
};

TIMING_INLINE struct span span_start(void) {
    struct span s;
    s.cpu = cpu_now();
    s.wall = wall_now();
    return s;
}

TIMING_INLINE struct span span_since(struct span start) {
    long wall = wall_now();
    long cpu = cpu_now();
    struct span d = {cpu - start.cpu, wall - start.wall};
    return d;
}

static char times_buf[1 << 16];
static unsigned long times_len;

/* Append one whole line to the side-file buffer; safe from several threads at once (not
   from signal handlers). Lines that do not fit are dropped, and times_write says so. */
TIMING_INLINE void times_line(const char *line, int n) {
    if (n <= 0)
        return;
    unsigned long at = __atomic_fetch_add(&times_len, (unsigned long)n, __ATOMIC_RELAXED);
    if (at + n <= sizeof times_buf)
        memcpy(times_buf + at, line, n);
}

TIMING_INLINE void times_add(const char *key, long tid, long cpu_ns, long wall_ns) {
    char line[128];
    times_line(line, snprintf(line, sizeof line, "%s %ld %ld %ld\n", key, tid, cpu_ns, wall_ns));
}

TIMING_INLINE void times_span(const char *key, long tid, struct span d) {
    times_add(key, tid, d.cpu, d.wall);
}

TIMING_INLINE void times_count(const char *key, long n) {
    char line[128];
    times_line(line, snprintf(line, sizeof line, "%s %ld\n", key, n));
}

/* Write the collected lines to $TIMES_FILE (nothing if it is not set). Call once, from
   one thread, after the others are done. */
TIMING_INLINE void times_write(void) {
    const char *path = getenv("TIMES_FILE");
    if (!path || !*path)
        return;
    FILE *f = fopen(path, "w");
    if (!f) {
        perror(path);
        exit(99);
    }
    unsigned long len = __atomic_load_n(&times_len, __ATOMIC_RELAXED);
    if (len > sizeof times_buf) {
        fprintf(stderr, "%s: side-file buffer full (%lu bytes wanted)\n", path, len);
        exit(99);
    }
    fwrite(times_buf, 1, len, f);
    fclose(f);
}

#endif
