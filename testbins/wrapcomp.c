// wrapcomp: 10^6 uncontended mutex lock/unlock pairs (argv[1]) in a timed function
// `locker`, called from `outer`, for checking that the thread-library wrappers' cost is
// compensated (tests/it/wrapcomp.rs, DESIGN D21): the profile's inclusive CPU time of
// `locker` and `outer` against the uninstrumented program's own clock, and the lock counts.
//
// With TIMES_FILE set it writes `outer TID CPU_NS WALL_NS` (timing.h): the thread CPU time
// and wall time of the call of `outer`, measured by main. stdout does not depend on timing.
//
//# args: 1000000
//# cflags: -pthread
//# variants: pie-O2
//# expect: threads 1
//# expect: main calls locker 1
//# expect: main calls outer 1
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include "timing.h"

static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
static long shared;

__attribute__((noinline)) long locker(long n) {
    for (long i = 0; i < n; i++) {
        pthread_mutex_lock(&m);
        shared += i;
        pthread_mutex_unlock(&m);
    }
    return shared;
}

__attribute__((noinline)) long outer(long n) {
    return locker(n) + 1;
}

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 1000000L;
    struct span s = span_start();
    long r = outer(n);
    times_span("outer", thread_id(), span_since(s));
    times_write();
    printf("wrapcomp: %ld pairs, sum %ld\n", n, r);
    return 0;
}
