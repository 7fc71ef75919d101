// locks_kinds: every kind of mutex through the wrappers' paths, with exact numbers
// (tests/locks.rs `mutex_kinds*`: counts, contended, calls and hold times per mutex, the
// same under the default spec, whose uncontended locks and unlocks take the wrappers' fast
// path, with state_trace on, which keeps them on the full path, and with calls on and the
// lock metrics off, which the thunks count by themselves).
//
// main, on its own (no other thread holds any of these mutexes while main uses them):
//   for each mutex M of normal, errorcheck, recursive, robust, pi (PTHREAD_PRIO_INHERIT):
//     1000 x lock(M); unlock(M)                       count 1000
//     100 x timedlock(M, 10 s ahead); unlock(M)       count  100
//     50 x trylock(M) (succeeds); unlock(M)           count   50
//   errorcheck, 10 x: lock; lock -> EDEADLK; unlock   count +10, contended +10
//   recursive, 10 x: lock; lock; unlock; unlock       count +20, contended +10
//   normal, 5 x: lock; sleep 2 ms; unlock             count +5; main measures each hold
//   robust: a thread ("dier") locks it and returns without unlocking; main's next lock
//     returns EOWNERDEAD (no acquisition, contended +1: the lock word was not 0);
//     pthread_mutex_consistent; unlock.
// Per mutex of main:
//     normal      count 1155  contended  0
//     errorcheck  count 1160  contended 10
//     recursive   count 1170  contended 10
//     robust      count 1150  contended  1
//     pi          count 1150  contended  0
// main's calls: pthread_mutex_lock 5 x 1000 + 20 + 20 + 5 + 1 = 5046 (the
// EDEADLK and EOWNERDEAD calls count as calls), pthread_mutex_timedlock 500,
// pthread_mutex_trylock 250, pthread_mutex_unlock 5 x 1150 + 10 + 20 + 5 + 1 = 5786.
// dier: pthread_mutex_lock 1 (robust: count 1), no unlock.
//
// With TIMES_FILE set (see timing.h):
//     tid ROLE TID               gettid() of main and dier
//     obj NAME 0xADDR            run-time addresses of the five mutexes
//     hold normal NS             the sum of the five 2 ms holds, as main measured them
//                                (from after the lock returned to before the unlock)
//
//# cflags: -pthread
//# variants: pie-O2 nopie-O0
//# expect: threads 2
//# expect: threads from dier 1
//# expect: thread dier calls dier 1
//# expect: main calls main 1
//# expect: main calls pairs 5
#define _GNU_SOURCE
#include "timing.h"
#include <errno.h>
#include <pthread.h>
#include <stdint.h>

#define SIDE(...)                                                                         \
    do {                                                                                  \
        char line_[256];                                                                  \
        times_line(line_, snprintf(line_, sizeof line_, __VA_ARGS__));                    \
    } while (0)

enum { NORMAL, ERRORCHECK, RECURSIVE, ROBUST, PI, KINDS };
static const char *names[KINDS] = {"normal", "errorcheck", "recursive", "robust", "pi"};
static pthread_mutex_t m[KINDS];
static long sum;

static void check(int rc, int want, const char *what, int k) {
    if (rc != want) {
        fprintf(stderr, "%s (%s) returned %d, want %d\n", what, names[k], rc, want);
        exit(3);
    }
}

static void init(int k) {
    pthread_mutexattr_t a;
    pthread_mutexattr_init(&a);
    if (k == ERRORCHECK)
        pthread_mutexattr_settype(&a, PTHREAD_MUTEX_ERRORCHECK);
    if (k == RECURSIVE)
        pthread_mutexattr_settype(&a, PTHREAD_MUTEX_RECURSIVE);
    if (k == ROBUST)
        pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
    if (k == PI)
        pthread_mutexattr_setprotocol(&a, PTHREAD_PRIO_INHERIT);
    check(pthread_mutex_init(&m[k], &a), 0, "pthread_mutex_init", k);
    pthread_mutexattr_destroy(&a);
}

__attribute__((noinline)) void *dier(void *arg) {
    (void)arg;
    SIDE("tid dier %ld\n", thread_id());
    check(pthread_mutex_lock(&m[ROBUST]), 0, "pthread_mutex_lock (dier)", ROBUST);
    return NULL; // owner dies holding it
}

__attribute__((noinline)) void pairs(int k) {
    pthread_mutex_t *x = &m[k];
    for (long i = 0; i < 1000; i++) {
        check(pthread_mutex_lock(x), 0, "pthread_mutex_lock", k);
        sum += i;
        check(pthread_mutex_unlock(x), 0, "pthread_mutex_unlock", k);
    }
    for (long i = 0; i < 100; i++) {
        struct timespec deadline;
        clock_gettime(CLOCK_REALTIME, &deadline);
        deadline.tv_sec += 10;
        check(pthread_mutex_timedlock(x, &deadline), 0, "pthread_mutex_timedlock", k);
        sum++;
        check(pthread_mutex_unlock(x), 0, "pthread_mutex_unlock", k);
    }
    for (long i = 0; i < 50; i++) {
        check(pthread_mutex_trylock(x), 0, "pthread_mutex_trylock", k);
        sum++;
        check(pthread_mutex_unlock(x), 0, "pthread_mutex_unlock", k);
    }
}

int main(void) {
    SIDE("tid main %ld\n", thread_id());
    for (int k = 0; k < KINDS; k++) {
        init(k);
        SIDE("obj %s 0x%lx\n", names[k], (unsigned long)(uintptr_t)&m[k]);
    }
    for (int k = 0; k < KINDS; k++)
        pairs(k);
    for (int i = 0; i < 10; i++) {
        check(pthread_mutex_lock(&m[ERRORCHECK]), 0, "pthread_mutex_lock", ERRORCHECK);
        check(pthread_mutex_lock(&m[ERRORCHECK]), EDEADLK, "pthread_mutex_lock (relock)", ERRORCHECK);
        check(pthread_mutex_unlock(&m[ERRORCHECK]), 0, "pthread_mutex_unlock", ERRORCHECK);
    }
    for (int i = 0; i < 10; i++) {
        check(pthread_mutex_lock(&m[RECURSIVE]), 0, "pthread_mutex_lock", RECURSIVE);
        check(pthread_mutex_lock(&m[RECURSIVE]), 0, "pthread_mutex_lock (relock)", RECURSIVE);
        check(pthread_mutex_unlock(&m[RECURSIVE]), 0, "pthread_mutex_unlock", RECURSIVE);
        check(pthread_mutex_unlock(&m[RECURSIVE]), 0, "pthread_mutex_unlock", RECURSIVE);
    }
    long held = 0;
    for (int i = 0; i < 5; i++) {
        check(pthread_mutex_lock(&m[NORMAL]), 0, "pthread_mutex_lock (hold)", NORMAL);
        long t0 = wall_now_raw();
        struct timespec ms2 = {0, 2000000};
        nanosleep(&ms2, NULL);
        long t1 = wall_now_raw();
        check(pthread_mutex_unlock(&m[NORMAL]), 0, "pthread_mutex_unlock (hold)", NORMAL);
        held += t1 - t0;
    }
    SIDE("hold normal %ld\n", held);
    pthread_t t;
    if (pthread_create(&t, NULL, dier, NULL)) {
        fprintf(stderr, "pthread_create failed\n");
        return 1;
    }
    pthread_join(t, NULL);
    check(pthread_mutex_lock(&m[ROBUST]), EOWNERDEAD, "pthread_mutex_lock (owner died)", ROBUST);
    check(pthread_mutex_consistent(&m[ROBUST]), 0, "pthread_mutex_consistent", ROBUST);
    check(pthread_mutex_unlock(&m[ROBUST]), 0, "pthread_mutex_unlock", ROBUST);
    printf("locks_kinds: sum %ld\n", sum);
    times_write();
    return 0;
}
