// locks_counts: exact numbers of mutex calls per thread (tests/locks.rs: the calls of
// wrapped functions counted under the import's name, wait counts and contended counts).
//
// Worker k (k = 1, 2, 3, each a thread running `worker`) uses its own mutex priv[k] and
// the shared mutex `shared`:
//   - k * 1000 times: pthread_mutex_lock(&priv[k]); on every 10th of these, while holding
//     it, pthread_mutex_trylock(&priv[k]), which returns EBUSY (a default mutex the caller
//     holds); pthread_mutex_unlock(&priv[k]);
//   - k * 50 times: pthread_mutex_trylock(&priv[k]), which succeeds; unlock;
//   - k * 100 times: pthread_mutex_timedlock(&priv[k], 10 s ahead), which succeeds; unlock;
//   - 200 times: pthread_mutex_lock(&shared); unlock.
// No other thread touches priv[k], so no acquisition of priv[k] finds it locked: its only
// contended calls are the k * 100 EBUSY trylocks. Per worker k:
//     pthread_mutex_lock      k * 1000 + 200 calls
//     pthread_mutex_trylock   k * 150 calls (k * 100 EBUSY, k * 50 successes)
//     pthread_mutex_timedlock k * 100 calls
//     pthread_mutex_unlock    k * 1150 + 200 calls
//     waits on priv[k]        count k * 1150, contended k * 100
//     waits on shared         count 200
// main calls pthread_create and pthread_join 3 times each and no mutex function. No thread
// is named: every thread's name is the program's comm.
//
// With TIMES_FILE set (see timing.h):
//     tid ROLE TID                 gettid() of main and worker1..worker3
//     obj NAME 0xADDR              run-time addresses of priv1..priv3 and shared
//
//# cflags: -pthread
//# variants: pie-O2 nopie-O0
//# expect: threads 4
//# expect: threads from worker 3
//# expect: thread worker calls worker 1
//# expect: main calls main 1
#define _GNU_SOURCE
#include "timing.h"
#include <errno.h>
#include <pthread.h>
#include <stdint.h>

#define WORKERS 3

#define SIDE(...)                                                                         \
    do {                                                                                  \
        char line_[256];                                                                  \
        times_line(line_, snprintf(line_, sizeof line_, __VA_ARGS__));                    \
    } while (0)

static pthread_mutex_t priv[WORKERS + 1] = {
    PTHREAD_MUTEX_INITIALIZER, PTHREAD_MUTEX_INITIALIZER, PTHREAD_MUTEX_INITIALIZER,
    PTHREAD_MUTEX_INITIALIZER};
static pthread_mutex_t shared = PTHREAD_MUTEX_INITIALIZER;
static long shared_counter;
static long private_sum[WORKERS + 1];

static void check(int rc, int want, const char *what) {
    if (rc != want) {
        fprintf(stderr, "%s returned %d, want %d\n", what, rc, want);
        exit(3);
    }
}

__attribute__((noinline)) void *worker(void *arg) {
    long k = (long)arg;
    pthread_mutex_t *m = &priv[k];
    SIDE("tid worker%ld %ld\n", k, thread_id());
    for (long i = 0; i < k * 1000; i++) {
        check(pthread_mutex_lock(m), 0, "pthread_mutex_lock");
        private_sum[k] += i;
        if (i % 10 == 0)
            check(pthread_mutex_trylock(m), EBUSY, "pthread_mutex_trylock (held)");
        check(pthread_mutex_unlock(m), 0, "pthread_mutex_unlock");
    }
    for (long i = 0; i < k * 50; i++) {
        check(pthread_mutex_trylock(m), 0, "pthread_mutex_trylock (free)");
        private_sum[k]++;
        check(pthread_mutex_unlock(m), 0, "pthread_mutex_unlock");
    }
    for (long i = 0; i < k * 100; i++) {
        struct timespec deadline;
        clock_gettime(CLOCK_REALTIME, &deadline);
        deadline.tv_sec += 10;
        check(pthread_mutex_timedlock(m, &deadline), 0, "pthread_mutex_timedlock");
        private_sum[k]++;
        check(pthread_mutex_unlock(m), 0, "pthread_mutex_unlock");
    }
    for (long i = 0; i < 200; i++) {
        check(pthread_mutex_lock(&shared), 0, "pthread_mutex_lock (shared)");
        shared_counter++;
        check(pthread_mutex_unlock(&shared), 0, "pthread_mutex_unlock (shared)");
    }
    return NULL;
}

int main(void) {
    SIDE("tid main %ld\n", thread_id());
    for (int k = 1; k <= WORKERS; k++)
        SIDE("obj priv%d 0x%lx\n", k, (unsigned long)(uintptr_t)&priv[k]);
    SIDE("obj shared 0x%lx\n", (unsigned long)(uintptr_t)&shared);
    pthread_t t[WORKERS + 1];
    for (long k = 1; k <= WORKERS; k++) {
        if (pthread_create(&t[k], NULL, worker, (void *)k)) {
            fprintf(stderr, "pthread_create failed\n");
            return 1;
        }
    }
    for (int k = 1; k <= WORKERS; k++)
        pthread_join(t[k], NULL);
    for (int k = 1; k <= WORKERS; k++)
        printf("worker %d: %ld\n", k, private_sum[k]);
    printf("shared: %ld\n", shared_counter);
    times_write();
    return 0;
}
