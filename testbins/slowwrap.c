// slowwrap: the thread-library wrappers' full path under a timed caller (tests/it/slowwrap.rs,
// DESIGN D21). `locks` takes an rwlock for reading and for writing, a mutex with trylock and
// a recursive mutex it already holds, argv[1] times each (default 100,000): the rwlock calls,
// the trylock and the relock (its lock word is taken: to the wrapper a contended lock, timed,
// `contended` counted) never take the wrappers' fast path (`stint_rt_wrap` records them: a
// timed wait, state transitions, the object and its wait entry), the mutexes' unlocks do.
// `outer` calls `locks`; one thread, nothing blocks, so the original's time is steady.
//
// With TIMES_FILE set it writes `outer TID CPU_NS WALL_NS` (timing.h): the thread CPU time
// and wall time of the call of `outer`, measured by main. stdout does not depend on timing.
//
//# args: 100000
//# cflags: -pthread
//# variants: pie-O2
//# expect: threads 1
//# expect: main calls locks 1
//# expect: main calls outer 1
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include "timing.h"

static pthread_rwlock_t rw = PTHREAD_RWLOCK_INITIALIZER;
static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t rec;
static long shared;

__attribute__((noinline)) long locks(long n) {
    long busy = 0;
    pthread_mutex_lock(&rec);
    for (long i = 0; i < n; i++) {
        pthread_rwlock_rdlock(&rw);
        long v = shared;
        pthread_rwlock_unlock(&rw);
        pthread_rwlock_wrlock(&rw);
        shared = v + i;
        pthread_rwlock_unlock(&rw);
        if (pthread_mutex_trylock(&m) == 0)
            pthread_mutex_unlock(&m);
        else
            busy++;
        pthread_mutex_lock(&rec);
        shared++;
        pthread_mutex_unlock(&rec);
    }
    pthread_mutex_unlock(&rec);
    return shared + busy;
}

__attribute__((noinline)) long outer(long n) {
    return locks(n) + 1;
}

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 100000L;
    pthread_mutexattr_t a;
    pthread_mutexattr_init(&a);
    pthread_mutexattr_settype(&a, PTHREAD_MUTEX_RECURSIVE);
    pthread_mutex_init(&rec, &a);
    struct span s = span_start();
    long r = outer(n);
    times_span("outer", thread_id(), span_since(s));
    times_write();
    printf("slowwrap: %ld rounds, sum %ld\n", n, r);
    return 0;
}
