// sampling_stall: a short function (`tiny`) called N times from `loop`, some of its calls
// stalled by a sleep inside them, for tests/it/sampling.rs: the runtime's sampling decision
// and wall-time estimate when the thread is switched out inside a call.
//
//   sampling_stall N AT EVERY US
//
// - N calls of `tiny` (default 100000);
// - call number AT (1-based; 0: none) sleeps US µs (default 1000) inside `tiny`, and with
//   EVERY > 0 so does every EVERY-th call after it, up to call 1000 (a function that blocks
//   while the runtime learns, then stops blocking).
//
// With TIMES_FILE it writes `loop TID CPU_NS WALL_NS` (around the call of `loop`) and
// `stall TID CPU_NS WALL_NS` (the sleeps, summed; timing.h). stdout does not depend on timing.
//
//# args: 100000
//# variants: pie-O2
//# expect: threads 1
//# expect: main calls tiny 100000
//# expect: main calls loop 1
#include <stdio.h>
#include <stdlib.h>
#include "timing.h"

static long stall_at, stall_every, stall_us;
static struct span stalled;

__attribute__((noinline)) long tiny(long i) {
    long y = i * 3;
    y ^= y >> 7;
    if (i == stall_at || (stall_every > 0 && i > stall_at && i <= 1000 && (i - stall_at) % stall_every == 0)) {
        struct span s = span_start();
        struct timespec ts = {stall_us / 1000000, (stall_us % 1000000) * 1000};
        nanosleep(&ts, NULL);
        struct span d = span_since(s);
        stalled.cpu += d.cpu;
        stalled.wall += d.wall;
    }
    return y + 11;
}

__attribute__((noinline)) long loop(long n) {
    long acc = 0;
    for (long i = 1; i <= n; i++)
        acc += tiny(i);
    return acc;
}

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 100000L;
    stall_at = argc > 2 ? atol(argv[2]) : 0;
    stall_every = argc > 3 ? atol(argv[3]) : 0;
    stall_us = argc > 4 ? atol(argv[4]) : 1000;
    struct span s = span_start();
    long acc = loop(n);
    times_span("loop", thread_id(), span_since(s));
    times_span("stall", thread_id(), stalled);
    times_write();
    printf("sampling_stall: %ld calls, acc %ld\n", n, acc);
    return 0;
}
