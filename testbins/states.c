// states: one thread that sleeps 300 ms (nanosleep: off a CPU, outside every wrapped
// thread-library call) and one that spins for 300 ms of its own CPU time, for checking the
// split of RUN into on-CPU, off-CPU and run-queue time (tests/it/states.rs, issue 12).
//
//# cflags: -pthread
//# variants: pie-O2 nopie-O0
//# expect: main calls main 1
//# expect: threads 3
//# expect: threads from sleeper 1
//# expect: threads from spinner 1
#include <pthread.h>
#include <stdio.h>
#include <time.h>
#include "timing.h"

static unsigned long spun;

__attribute__((noinline)) void *sleeper(void *arg) {
    (void)arg;
    struct timespec ts = {0, 300 * 1000000L};
    nanosleep(&ts, NULL);
    return NULL;
}

__attribute__((noinline)) void *spinner(void *arg) {
    (void)arg;
    long start = cpu_now();
    unsigned long x = 1;
    while (cpu_now() - start < 300 * 1000000L)
        x = spin(x, 100000);
    spun = x;
    return NULL;
}

int main(void) {
    pthread_t a, b;
    pthread_create(&a, NULL, sleeper, NULL);
    pthread_create(&b, NULL, spinner, NULL);
    pthread_join(a, NULL);
    pthread_join(b, NULL);
    printf("states: done%s\n", spun == 0 ? " (never)" : "");
    return 0;
}
