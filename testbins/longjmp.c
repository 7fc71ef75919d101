// longjmp: leaving instrumented frames without a ret (tests/timers.rs).
//
// f(x) calls setjmp, then g -> h -> k; k longjmps back into f, so g, h and k are left
// without returning. f then reads the wall clock ("landing"; the libc call of that read is
// the first instrumented event above those frames) and calls after(): the measurement
// shadow stack must close g, h and k at the landing (3 abandoned frames per jump), with
// their time running up to that event. g, h and k
// spin 1 unit each and after() 3 units (a unit is about 0.2 ms), so frames closed later
// than the landing would show in their times. main calls f 50 times.
//
// With TIMES_FILE set (see timing.h), it writes
//     f TID CPU_NS WALL_NS      around each call of f, measured by main
//     g TID 0 WALL_NS           sum over the jumps of (early landing - the clock read at the
//     h TID 0 WALL_NS           top of g, h, k): the early landing is read by a system call
//     k TID 0 WALL_NS           of its own just before the landing's libc call, so these
//                               are lower bounds of the frames' times
//     g_call TID 0 WALL_NS      the same from the clock read by the caller just before the
//     h_call TID 0 WALL_NS      call: the entry trampolines (of the function and of the
//     k_call TID 0 WALL_NS      clock read's libc call) run between the two reads, and
//                               on a loaded machine a thread switch there (they may make a
//                               system call) counts in the function's time
//     after TID CPU_NS WALL_NS  around each call of after, measured by f
// stdout does not depend on timing.
//
//# variants: pie-O2 nopie-O0
//# expect: threads 1
//# expect: main calls main 1
//# expect: main calls f 50
//# expect: main calls g 50
//# expect: main calls h 50
//# expect: main calls k 50
//# expect: main calls after 50
#include "timing.h"
#include <setjmp.h>

#define UNIT 130000L /* spin rounds, about 0.2 ms */
#define JUMPS 50

static jmp_buf env;
static volatile unsigned long sink;
static long g_start, h_start, k_start; /* read at the top of g, h, k */
static long g_call, h_call, k_call;    /* read by their callers just before the call */
static long g_span, h_span, k_span, g_call_span, h_call_span, k_call_span;

__attribute__((noipa)) unsigned long after(unsigned long x) {
    return spin(x, 3 * UNIT);
}

__attribute__((noipa)) void k(unsigned long x) {
    k_start = wall_now();
    sink = spin(x, UNIT);
    longjmp(env, 1);
}

__attribute__((noipa)) unsigned long h(unsigned long x) {
    h_start = wall_now();
    x = spin(x, UNIT);
    k_call = wall_now();
    k(x);
    sink = x; /* after the call: k is not a tail call */
    return x;
}

__attribute__((noipa)) unsigned long g(unsigned long x) {
    g_start = wall_now();
    x = spin(x, UNIT);
    h_call = wall_now();
    unsigned long r = h(x);
    sink = r;
    return r + 1;
}

__attribute__((noipa)) unsigned long f(unsigned long x) {
    if (setjmp(env) == 0) {
        g_call = wall_now();
        g(x);
        fprintf(stderr, "longjmp: g returned\n");
        exit(1);
    }
    /* The landing: the call of this clock read is the first event above g, h and k. Its
       trampoline runs before the read and may make the CPU clock's system call, where a
       loaded machine switches threads, so `landing` can be late by a time slice; `early`
       (a system call of its own, not an event) is read before that event. */
    long early = wall_now_raw();
    long landing = wall_now();
    g_span += early - g_start;
    h_span += early - h_start;
    k_span += early - k_start;
    g_call_span += landing - g_call;
    h_call_span += landing - h_call;
    k_call_span += landing - k_call;
    struct span s = span_start();
    unsigned long r = after(x);
    times_span("after", thread_id(), span_since(s));
    sink = r; /* after() is not a tail call */
    return r;
}

int main(void) {
    long tid = thread_id();
    unsigned long check = 0;
    for (int i = 0; i < JUMPS; i++) {
        struct span s = span_start();
        check += f(i);
        times_span("f", tid, span_since(s));
    }
    times_add("g", tid, 0, g_span);
    times_add("h", tid, 0, h_span);
    times_add("k", tid, 0, k_span);
    times_add("g_call", tid, 0, g_call_span);
    times_add("h_call", tid, 0, h_call_span);
    times_add("k_call", tid, 0, k_call_span);
    times_write();
    printf("longjmp: %d jumps, check %lx\n", JUMPS, check);
    fprintf(stderr, "longjmp: done\n");
    return 0;
}
