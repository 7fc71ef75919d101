// compensation: 10^7 calls (argv[1]) of a tiny function from `loop`, for checking overhead
// compensation (tests/it/compensation.rs, DESIGN D21): the profile's time per call of
// `tiny` and the inclusive time of `loop` against the uninstrumented program's own clock.
//
// With TIMES_FILE set it writes `loop TID CPU_NS WALL_NS` (timing.h): the thread CPU time
// and wall time of the call of `loop`, measured by main. stdout does not depend on timing.
//
//# args: 10000000
//# variants: pie-O2 nopie-O0
//# expect: threads 1
//# expect: main calls tiny 10000000
//# expect: main calls loop 1
#include <stdio.h>
#include <stdlib.h>
#include "timing.h"

__attribute__((noinline)) long tiny(long x) {
    long y = x * 3;
    y ^= y >> 7;
    return y + 11;
}

__attribute__((noinline)) long loop(long n) {
    long acc = 0;
    for (long i = 0; i < n; i++)
        acc += tiny(i);
    return acc;
}

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 10000000L;
    struct span s = span_start();
    long acc = loop(n);
    times_span("loop", thread_id(), span_since(s));
    times_write();
    printf("compensation: %ld calls, acc %ld\n", n, acc);
    return 0;
}
