// top_spin: main and two worker threads named "spin-a" and "spin-b" (pthread_setname_np)
// that, for argv[1] milliseconds (default 3000), loop calling `work` under a shared mutex,
// then main joins them and exits 0. tests/top.rs watches a long run of it with
// `stint top --once` and `stint ls` while it runs; the behaviour tests run it briefly.
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
    while (now_ms() < deadline_ms) {
        pthread_mutex_lock(&m);
        shared += work(i++);
        pthread_mutex_unlock(&m);
    }
    return NULL;
}

int main(int argc, char **argv) {
    long run_ms = argc > 1 ? atol(argv[1]) : 3000;
    deadline_ms = now_ms() + run_ms;
    pthread_t a, b;
    if (pthread_create(&a, NULL, spin, "spin-a") != 0 || pthread_create(&b, NULL, spin, "spin-b") != 0) {
        fprintf(stderr, "top_spin: pthread_create failed\n");
        return 2;
    }
    pthread_join(a, NULL);
    pthread_join(b, NULL);
    printf("top_spin: two workers ran for %ld ms\n", run_ms);
    return 0;
}
