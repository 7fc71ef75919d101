// nowrap: one thread and no thread-library call, so the rewritten program has no wrapper
// point and its runtime skips the wrapper calibrations at start (tests/it/rseqclk.rs,
// issue 14). `work` spins, sleeps 20 ms and spins again, argv[1] times (default 3).
//
// With TIMES_FILE set it writes `work TID CPU_NS WALL_NS` (timing.h): the thread CPU time
// and wall time of all the calls of `work`, measured by main. stdout does not depend on
// timing.
//
//# args: 3
//# variants: pie-O2
//# expect: threads 1
//# expect: main calls work 3
//# expect: main calls main 1
#include <stdio.h>
#include <stdlib.h>
#include "timing.h"

static unsigned long sink;

__attribute__((noinline)) void work(void) {
    sink += spin(sink, 2000000);
    struct timespec ts = {0, 20000000};
    nanosleep(&ts, NULL);
    sink += spin(sink, 2000000);
}

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 3;
    struct span s = span_start();
    for (long i = 0; i < n; i++)
        work();
    times_span("work", thread_id(), span_since(s));
    times_write();
    printf("worked %ld times\n", n);
    return 0;
}
