// locks_mutex: one thread holds a mutex for 200 ms while another blocks on it
// (tests/locks.rs: mutex waits, lock_hold, thread states).
//
// holder locks m, raises the atomic flag `held` (an atomic, so that no other sync object
// takes part), sleeps 200 ms and unlocks. waiter spins (sched_yield) until `held` is set,
// then calls pthread_mutex_lock(&m), which blocks until the holder unlocks. main creates
// both threads and joins them. Each thread locks m exactly once.
//
// With TIMES_FILE set (see timing.h) it writes, besides nothing on stdout that depends on
// timing:
//     tid ROLE TID              gettid() of main, holder and waiter
//     obj m 0xADDR              the run-time address of the mutex
//     wait waiter m NS          wall time of the waiter's pthread_mutex_lock call
//     hold holder m NS          from the holder's lock call returning to its unlock call
//
//# cflags: -pthread
//# variants: pie-O2 nopie-O0
//# expect: threads 3
//# expect: threads from holder 1
//# expect: threads from waiter 1
//# expect: thread holder calls holder 1
//# expect: thread waiter calls waiter 1
//# expect: main calls main 1
#define _GNU_SOURCE
#include "timing.h"
#include <pthread.h>
#include <sched.h>
#include <stdint.h>

#define HOLD_MS 200

#define SIDE(...)                                                                         \
    do {                                                                                  \
        char line_[256];                                                                  \
        times_line(line_, snprintf(line_, sizeof line_, __VA_ARGS__));                    \
    } while (0)

static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
static int held;

__attribute__((noinline)) void *holder(void *arg) {
    (void)arg;
    SIDE("tid holder %ld\n", thread_id());
    pthread_mutex_lock(&m);
    long acquired = wall_now_raw();
    __atomic_store_n(&held, 1, __ATOMIC_RELEASE);
    struct timespec ts = {0, HOLD_MS * 1000000L};
    while (nanosleep(&ts, &ts) != 0) {
    }
    long released = wall_now_raw();
    pthread_mutex_unlock(&m);
    SIDE("hold holder m %ld\n", released - acquired);
    return NULL;
}

__attribute__((noinline)) void *waiter(void *arg) {
    (void)arg;
    SIDE("tid waiter %ld\n", thread_id());
    while (!__atomic_load_n(&held, __ATOMIC_ACQUIRE))
        sched_yield();
    long t0 = wall_now_raw();
    pthread_mutex_lock(&m);
    long t1 = wall_now_raw();
    pthread_mutex_unlock(&m);
    SIDE("wait waiter m %ld\n", t1 - t0);
    return NULL;
}

int main(void) {
    SIDE("tid main %ld\n", thread_id());
    SIDE("obj m 0x%lx\n", (unsigned long)(uintptr_t)&m);
    pthread_t a, b;
    if (pthread_create(&a, NULL, holder, NULL) || pthread_create(&b, NULL, waiter, NULL)) {
        fprintf(stderr, "pthread_create failed\n");
        return 1;
    }
    pthread_join(a, NULL);
    pthread_join(b, NULL);
    printf("holder and waiter done\n");
    fprintf(stderr, "locks_mutex: ok\n");
    times_write();
    return 0;
}
