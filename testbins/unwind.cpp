// unwind: C++ exceptions thrown through instrumented frames (tests/timers.rs). The harness
// builds only `*.c` with gcc; tests/timers.rs builds this file itself with g++, in the
// variants below, with the same flags.
//
// a(x) calls b -> c -> d inside a try block; b holds a Guard (an object with a destructor);
// d throws. b, c and d are left without a ret (3 abandoned frames per throw); the
// measurement shadow stack closes each at the first instrumented event above it, with its
// time running up to that event:
//   - ~Guard, which the unwinder calls from b's landing pad, is entered with a stack
//     pointer above d's frame and equal to c's (b calls both from the same frame): d closes
//     there, c there or at the next event;
//   - a's catch block (entered through __cxa_begin_catch, the first event above b's frame:
//     b closes there; at -O2 the block is in a.cold and b may close as late as after()'s
//     entry) reads the wall clock ("landing") first, then calls after().
// ~Guard reads the clock as its first statement ("unwound"). b, c and d spin 1 unit each
// and after() 3 units (a unit is about 0.2 ms). main calls a 50 times.
//
// With TIMES_FILE set (see timing.h), it writes sums over the throws of
//     a TID CPU_NS WALL_NS       around each call of a, measured by main
//     b TID 0 WALL_NS            guarded - the clock read at the top of b
//     c TID 0 WALL_NS            thrown - the clock read at the top of c
//     c_late TID 0 WALL_NS       landing - the clock read at the top of c
//     d TID 0 WALL_NS            thrown - the clock read at the top of d
//                                (thrown: read by d just before the throw; guarded: read by
//                                ~Guard as it ends; both by a system call of their own, not
//                                an event of the rewritten program, so these are lower
//                                bounds: a read after the event that closes a frame, such
//                                as unwound or landing, can be late by a time slice when the
//                                event's trampoline makes the CPU clock's system call)
//     b_call, c_late_call, d_call TID 0 WALL_NS   from the clock read by the caller just
//                                before the call to the clock read just before after()
//                                (b_call, c_late_call) or unwound (d_call): the upper bounds
//                                of b, c and d. The entry trampolines (of
//                                the function and of the clock read's libc call) run between
//                                the two reads, and on a loaded machine a thread switch there
//                                (they may make a system call) counts in the function's time
//     after TID CPU_NS WALL_NS   around each call of after, measured by a
// stdout does not depend on timing.
//
//# variants: pie-O2 nopie-O0
//# expect: threads 1
//# expect: main calls main 1
//# expect: main calls a 50
//# expect: main calls b 50
//# expect: main calls c 50
//# expect: main calls d 50
//# expect: main calls after 50
#include "timing.h"

#define UNIT 130000L /* spin rounds, about 0.2 ms */
#define THROWS 50

struct Boom {
    unsigned long value;
};

static volatile unsigned long sink;
static long b_start, c_start, d_start, unwound; /* read at the top of b, c, d */
static long thrown, guarded;                   /* read before the throw, as ~Guard ends */
static long b_call, c_call, d_call;             /* read by their callers just before the call */
static long b_span, c_span, c_late_span, d_span, b_call_span, c_late_call_span, d_call_span;
static long guards_alive;

struct Guard {
    __attribute__((noinline)) Guard() {
        guards_alive++;
    }
    /* Runs only while unwinding: b never returns normally. */
    __attribute__((noinline)) ~Guard() {
        unwound = wall_now();
        c_span += thrown - c_start;
        d_span += thrown - d_start;
        d_call_span += unwound - d_call;
        guards_alive--;
        guarded = wall_now_raw();
    }
};

extern "C" {

__attribute__((noipa)) unsigned long after(unsigned long x) {
    return spin(x, 3 * UNIT);
}

__attribute__((noipa)) unsigned long d(unsigned long x) {
    d_start = wall_now();
    x = spin(x, UNIT);
    if (x != 0) { /* always: a throw the compiler cannot prove */
        thrown = wall_now_raw();
        throw Boom{x};
    }
    return x;
}

__attribute__((noipa)) unsigned long c(unsigned long x) {
    c_start = wall_now();
    x = spin(x, UNIT);
    d_call = wall_now();
    unsigned long r = d(x);
    sink = r; /* after the call: d is not a tail call */
    return r + 1;
}

__attribute__((noipa)) unsigned long b(unsigned long x) {
    b_start = wall_now();
    Guard guard;
    x = spin(x, UNIT);
    c_call = wall_now();
    unsigned long r = c(x);
    sink = r;
    return r + 1;
}

__attribute__((noipa)) unsigned long a(unsigned long x) {
    try {
        b_call = wall_now();
        sink = b(x);
        fprintf(stderr, "unwind: b returned\n");
        exit(1);
    } catch (const Boom &e) {
        /* The landing, read before the CPU clock's system call (where a loaded machine
           switches threads): only __cxa_begin_catch and this read's call lie between the
           first event above b's frame and the read. */
        long landing = wall_now();
        b_span += guarded - b_start;
        c_late_span += landing - c_start;
        struct span s = span_start();
        /* At -O2 the catch block is in a.cold; b closed later than the landing there under
           load (its libc calls seem not to be events), at latest at after()'s entry, just
           after s.wall. */
        b_call_span += s.wall - b_call;
        c_late_call_span += s.wall - c_call;
        unsigned long r = after(e.value);
        times_span("after", thread_id(), span_since(s));
        sink = r;
        return r;
    }
}

} // extern "C"

int main() {
    long tid = thread_id();
    unsigned long check = 0;
    for (int i = 0; i < THROWS; i++) {
        struct span s = span_start();
        check += a(i + 1);
        times_span("a", tid, span_since(s));
    }
    if (guards_alive != 0) {
        fprintf(stderr, "unwind: %ld guards not destroyed\n", guards_alive);
        return 1;
    }
    times_add("b", tid, 0, b_span);
    times_add("c", tid, 0, c_span);
    times_add("c_late", tid, 0, c_late_span);
    times_add("d", tid, 0, d_span);
    times_add("b_call", tid, 0, b_call_span);
    times_add("c_late_call", tid, 0, c_late_call_span);
    times_add("d_call", tid, 0, d_call_span);
    times_write();
    printf("unwind: %d throws caught, check %lx\n", THROWS, check);
    fprintf(stderr, "unwind: done\n");
    return 0;
}
