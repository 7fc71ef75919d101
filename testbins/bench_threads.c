// bench_threads: T short-lived threads (argv[1], default 1000), created and joined one at a
// time, each calling `work` 10 times; for the profile-memory figures of tests/bench/perf.py
// (file blocks and RSS at 1, 64 and 1,000 threads).
//
//# args: 64
//# variants: pie-O2 nopie-O0
//# cflags: -pthread
//# expect: threads 65
//# expect: threads from worker 64
//# expect: thread worker calls work 10
//# expect: main calls main 1
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

__attribute__((noipa)) long work(long x) {
    return x * 3 + 1;
}

static void *worker(void *arg) {
    long s = 0;
    for (int i = 0; i < 10; i++)
        s += work((long)arg + i);
    return (void *)s;
}

int main(int argc, char **argv) {
    long t = argc > 1 ? atol(argv[1]) : 1000, total = 0;
    for (long i = 0; i < t; i++) {
        pthread_t th;
        void *r;
        pthread_create(&th, NULL, worker, (void *)i);
        pthread_join(th, &r);
        total += (long)r;
    }
    printf("bench_threads: %ld threads, checksum %ld\n", t, total);
    return 0;
}
