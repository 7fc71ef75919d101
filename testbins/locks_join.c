// locks_join: threads with distinct start routines and names, their exits and the joins
// that wait for them (tests/locks.rs: thread records, BLOCKED_JOIN, waits of kind thread).
//
// main creates alpha_main, beta_main, gamma_main and delta_main, and names the first three
// right after creating each (pthread_setname_np from main: "alpha-w", "beta-w",
// "gamma-w"); then it raises the atomic flag `go`. Every thread waits for `go` (so each
// is named before it does anything else), then:
//   - alpha sleeps 20 ms and returns 11;
//   - beta creates beta_child_main (unnamed: its comm at start is the one it inherits from
//     beta, "beta-w"), joins it (the child sleeps 20 ms and returns 55) and returns 22;
//   - gamma sleeps 20 ms and calls pthread_exit(33) from gamma_leave;
//   - delta names itself "delta-self", sleeps 20 ms and returns 44.
// main joins alpha, beta and gamma with pthread_join and delta with pthread_timedjoin_np
// (10 s deadline), and prints what each returned (and what beta's child returned to
// beta). Every join waits (each thread sleeps).
//
// With TIMES_FILE set (see timing.h):
//     tid ROLE TID                 gettid() of main, alpha, beta, gamma, delta, child
//     handle ROLE 0xPTHREAD_T      the pthread_t of alpha..delta (written by main) and of
//                                  child (written by beta)
//     join WAITER ROLE NS          wall time of each join call, measured by its caller
//
//# cflags: -pthread
//# variants: pie-O2 nopie-O0
//# expect: threads 6
//# expect: threads from alpha_main 1
//# expect: threads from beta_main 1
//# expect: threads from gamma_main 1
//# expect: threads from delta_main 1
//# expect: threads from beta_child_main 1
//# expect: thread gamma_main calls gamma_leave 1
//# expect: main calls main 1
#define _GNU_SOURCE
#include "timing.h"
#include <pthread.h>
#include <sched.h>
#include <stdint.h>

#define NAP_MS 20

#define SIDE(...)                                                                         \
    do {                                                                                  \
        char line_[256];                                                                  \
        times_line(line_, snprintf(line_, sizeof line_, __VA_ARGS__));                    \
    } while (0)

static int go;
static long child_result;

static void wait_go(void) {
    while (!__atomic_load_n(&go, __ATOMIC_ACQUIRE))
        sched_yield();
}

static void nap(void) {
    struct timespec ts = {0, NAP_MS * 1000000L};
    while (nanosleep(&ts, &ts) != 0) {
    }
}

__attribute__((noinline)) void *alpha_main(void *arg) {
    (void)arg;
    SIDE("tid alpha %ld\n", thread_id());
    wait_go();
    nap();
    return (void *)11;
}

__attribute__((noinline)) void *beta_child_main(void *arg) {
    (void)arg;
    SIDE("tid child %ld\n", thread_id());
    nap();
    return (void *)55;
}

__attribute__((noinline)) void *beta_main(void *arg) {
    (void)arg;
    SIDE("tid beta %ld\n", thread_id());
    wait_go();
    pthread_t c;
    if (pthread_create(&c, NULL, beta_child_main, NULL)) {
        fprintf(stderr, "pthread_create failed\n");
        exit(1);
    }
    SIDE("handle child 0x%lx\n", (unsigned long)c);
    void *v = NULL;
    long t0 = wall_now_raw();
    pthread_join(c, &v);
    SIDE("join beta child %ld\n", wall_now_raw() - t0);
    child_result = (long)v;
    return (void *)22;
}

__attribute__((noinline)) void gamma_leave(long v) {
    pthread_exit((void *)v);
}

__attribute__((noinline)) void *gamma_main(void *arg) {
    (void)arg;
    SIDE("tid gamma %ld\n", thread_id());
    wait_go();
    nap();
    gamma_leave(33);
    return (void *)99; /* not reached */
}

__attribute__((noinline)) void *delta_main(void *arg) {
    (void)arg;
    SIDE("tid delta %ld\n", thread_id());
    wait_go();
    pthread_setname_np(pthread_self(), "delta-self");
    nap();
    return (void *)44;
}

int main(void) {
    SIDE("tid main %ld\n", thread_id());
    struct {
        const char *role, *name;
        void *(*fn)(void *);
        pthread_t t;
    } th[] = {
        {"alpha", "alpha-w", alpha_main, 0},
        {"beta", "beta-w", beta_main, 0},
        {"gamma", "gamma-w", gamma_main, 0},
        {"delta", NULL, delta_main, 0},
    };
    for (int i = 0; i < 4; i++) {
        if (pthread_create(&th[i].t, NULL, th[i].fn, NULL)) {
            fprintf(stderr, "pthread_create failed\n");
            return 1;
        }
        if (th[i].name && pthread_setname_np(th[i].t, th[i].name) != 0) {
            fprintf(stderr, "pthread_setname_np failed\n");
            return 1;
        }
        SIDE("handle %s 0x%lx\n", th[i].role, (unsigned long)th[i].t);
    }
    __atomic_store_n(&go, 1, __ATOMIC_RELEASE);
    for (int i = 0; i < 4; i++) {
        void *v = NULL;
        long t0 = wall_now_raw();
        int rc;
        if (i < 3) {
            rc = pthread_join(th[i].t, &v);
        } else {
            struct timespec deadline;
            clock_gettime(CLOCK_REALTIME, &deadline);
            deadline.tv_sec += 10;
            rc = pthread_timedjoin_np(th[i].t, &v, &deadline);
        }
        SIDE("join main %s %ld\n", th[i].role, wall_now_raw() - t0);
        printf("%s: join %d, returned %ld\n", th[i].role, rc, (long)v);
    }
    printf("child of beta returned %ld\n", child_result);
    times_write();
    return 0;
}
