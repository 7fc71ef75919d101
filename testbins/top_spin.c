// top_spin: main and two worker threads named "spin-a" and "spin-b" (pthread_setname_np)
// that, for argv[1] milliseconds (default 3000), or with argv[1] "-" until the process
// gets SIGUSR1, loop calling `work` under a shared mutex, then main joins them and exits 0.
// tests/top.rs watches a run of it with `stint top --once` and `stint ls` (main waits in
// the join meanwhile) and sends SIGUSR1 when it has seen what it needs; the behaviour tests
// run it briefly.
// Nothing it prints depends on timing.
//
//# args: 100
//# cflags: -pthread
//# variants: pie-O2
//# expect: threads 3
//# expect: threads from spin 2
//# expect: thread spin calls spin 1
//# expect: main calls main 1
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
static long shared;
static long deadline_ms;

static long now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000L + ts.tv_nsec / 1000000L;
}

__attribute__((noipa)) long work(long x) {
    long s = x;
    for (int i = 0; i < 200; i++)
        s = s * 31 + i;
    return s & 0xffff;
}

__attribute__((noipa)) void *spin(void *arg) {
    pthread_setname_np(pthread_self(), (const char *)arg);
    long i = 0;
    while (now_ms() < __atomic_load_n(&deadline_ms, __ATOMIC_RELAXED)) {
        pthread_mutex_lock(&m);
        shared += work(i++);
        pthread_mutex_unlock(&m);
    }
    return NULL;
}

static void on_stop(int sig) {
    (void)sig;
    __atomic_store_n(&deadline_ms, 0, __ATOMIC_RELAXED);
}

int main(int argc, char **argv) {
    int until_signal = argc > 1 && argv[1][0] == '-' && argv[1][1] == 0;
    long run_ms = argc > 1 ? atol(argv[1]) : 3000;
    deadline_ms = until_signal ? 0x7fffffffffffffffL : now_ms() + run_ms;
    if (until_signal)
        signal(SIGUSR1, on_stop);
    pthread_t a, b;
    if (pthread_create(&a, NULL, spin, "spin-a") != 0 || pthread_create(&b, NULL, spin, "spin-b") != 0) {
        fprintf(stderr, "top_spin: pthread_create failed\n");
        return 2;
    }
    pthread_join(a, NULL);
    pthread_join(b, NULL);
    if (until_signal)
        printf("top_spin: two workers ran until SIGUSR1\n");
    else
        printf("top_spin: two workers ran for %ld ms\n", run_ms);
    return 0;
}
