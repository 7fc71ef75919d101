// locks_rwlock: three readers block on a read/write lock while a writer holds it for
// 100 ms (tests/locks.rs: rwlock waits, BLOCKED_RWLOCK, lock_hold of an rwlock).
//
// The writer takes the write lock, raises the atomic flag `write_held`, sleeps 100 ms and
// unlocks. Each reader spins (sched_yield) until the flag is up, then calls
// pthread_rwlock_rdlock, which blocks until the writer unlocks; then it takes and releases
// the read lock 200 more times. Once main has joined the readers it raises the atomic
// `readers_done`, and the writer takes and releases the write lock 50 more times. Exact
// counts per thread: each reader 201 pthread_rwlock_rdlock calls, the writer 51
// pthread_rwlock_wrlock calls.
//
// With TIMES_FILE set (see timing.h):
//     tid ROLE TID                 gettid() of main, writer, reader0..reader2
//     obj rw 0xADDR                the run-time address of the rwlock
//     wait readerK rw NS           wall time of reader K's first (blocking) rdlock call
//     hold writer rw NS            from the writer's first wrlock returning to its unlock call
//
//# cflags: -pthread
//# variants: pie-O2 nopie-O0
//# expect: threads 5
//# expect: threads from reader 3
//# expect: threads from writer 1
//# expect: thread reader calls reader 1
//# expect: main calls main 1
#define _GNU_SOURCE
#include "timing.h"
#include <pthread.h>
#include <sched.h>
#include <stdint.h>

#define READERS 3
#define HOLD_MS 100
#define MORE_READS 200
#define MORE_WRITES 50

#define SIDE(...)                                                                         \
    do {                                                                                  \
        char line_[256];                                                                  \
        times_line(line_, snprintf(line_, sizeof line_, __VA_ARGS__));                    \
    } while (0)

static pthread_rwlock_t rw = PTHREAD_RWLOCK_INITIALIZER;
static int write_held, readers_done;
static long shared_value;

__attribute__((noinline)) void *writer(void *arg) {
    (void)arg;
    SIDE("tid writer %ld\n", thread_id());
    pthread_rwlock_wrlock(&rw);
    long acquired = wall_now_raw();
    __atomic_store_n(&write_held, 1, __ATOMIC_RELEASE);
    struct timespec ts = {0, HOLD_MS * 1000000L};
    while (nanosleep(&ts, &ts) != 0) {
    }
    shared_value = 1;
    long released = wall_now_raw();
    pthread_rwlock_unlock(&rw);
    SIDE("hold writer rw %ld\n", released - acquired);
    while (!__atomic_load_n(&readers_done, __ATOMIC_ACQUIRE))
        sched_yield();
    for (int i = 0; i < MORE_WRITES; i++) {
        pthread_rwlock_wrlock(&rw);
        shared_value++;
        pthread_rwlock_unlock(&rw);
    }
    return NULL;
}

__attribute__((noinline)) void *reader(void *arg) {
    long k = (long)arg;
    SIDE("tid reader%ld %ld\n", k, thread_id());
    while (!__atomic_load_n(&write_held, __ATOMIC_ACQUIRE))
        sched_yield();
    long t0 = wall_now_raw();
    pthread_rwlock_rdlock(&rw);
    long t1 = wall_now_raw();
    long seen = shared_value;
    pthread_rwlock_unlock(&rw);
    SIDE("wait reader%ld rw %ld\n", k, t1 - t0);
    for (int i = 0; i < MORE_READS; i++) {
        pthread_rwlock_rdlock(&rw);
        seen += shared_value;
        pthread_rwlock_unlock(&rw);
    }
    return (void *)seen;
}

int main(void) {
    SIDE("tid main %ld\n", thread_id());
    SIDE("obj rw 0x%lx\n", (unsigned long)(uintptr_t)&rw);
    pthread_t w, r[READERS];
    if (pthread_create(&w, NULL, writer, NULL)) {
        fprintf(stderr, "pthread_create failed\n");
        return 1;
    }
    for (long k = 0; k < READERS; k++) {
        if (pthread_create(&r[k], NULL, reader, (void *)k)) {
            fprintf(stderr, "pthread_create failed\n");
            return 1;
        }
    }
    long total = 0;
    for (int k = 0; k < READERS; k++) {
        void *v;
        pthread_join(r[k], &v);
        total += (long)v;
    }
    __atomic_store_n(&readers_done, 1, __ATOMIC_RELEASE);
    pthread_join(w, NULL);
    printf("readers saw %ld, final value %ld\n", total, shared_value);
    times_write();
    return 0;
}
