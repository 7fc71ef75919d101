// bench_locks: N uncontended pthread_mutex_lock/unlock pairs (argv[1], default 20,000,000),
// for measuring what a wrapped thread-library call costs (tests/bench.sh). The behaviour
// tests run it with a small N.
//
//# args: 10000
//# expect: threads 1
//# expect: main calls lockstep 10000
//# expect: main calls main 1
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
static long shared;

__attribute__((noipa)) void lockstep(long x) {
    pthread_mutex_lock(&m);
    shared += x;
    pthread_mutex_unlock(&m);
}

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 20000000L;
    for (long i = 0; i < n; i++)
        lockstep(i);
    printf("bench_locks: %ld lock/unlock pairs, sum %ld\n", n, shared);
    return 0;
}
